"""`fleetbench data`: generate synthetic data sets and validate files.

    fleetbench data gen NAME [args]           write synthetic data for data set NAME
    fleetbench data validate criteo PATH...   check files against the Criteo format [--json]

The registry is by module name: `fleetbench data gen NAME ...` runs `cli(argv)` of
`datasets/NAME.py`, and `fleetbench data validate NAME ...` its `validate_cli(argv)`. A data set
gets either command by defining that top-level function in its own module (as datasets/bert.py
and wmt16.py define `cli`); nothing here needs editing.
"""
import argparse
import importlib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_DATA_SETS = {"__init__", "cli"}


def modules_defining(function: str) -> list:
    """Names of the data-set modules with a top-level `function` (their source is read, not
    imported, so listing them imports neither paddle nor numpy)."""
    names = []
    for path in sorted(HERE.glob("*.py")):
        if path.stem not in NOT_DATA_SETS and re.search(rf"^def {function}\(", path.read_text(), re.M):
            names.append(path.stem)
    return names


def generators() -> list:
    return modules_defining("cli")


def validators() -> list:
    return modules_defining("validate_cli")


def _dispatch(kind: str, name: str, table: dict, rest: list) -> int:
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        print(f"fleetbench data {kind}: unknown data set {name!r} (known: {known})", file=sys.stderr)
        return 2
    module, function = table[name]
    return int(getattr(importlib.import_module(module), function)(rest) or 0)


def cli(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="fleetbench data", description=__doc__.split("\n\n")[0],
                                     usage="fleetbench data {gen,validate} NAME [args]")
    parser.add_argument("action", choices=["gen", "validate"])
    parser.add_argument("name", nargs="?", help="data set: gen " + "|".join(generators())
                        + "; validate " + "|".join(validators()))
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    args, rest = parser.parse_known_args(argv[:2])
    if args.name is None:
        parser.error("missing data set name")
    rest = argv[2:]
    if args.action == "gen":
        return _dispatch("gen", args.name, {n: (f"datasets.{n}", "cli") for n in generators()}, rest)
    return _dispatch("validate", args.name, {n: (f"datasets.{n}", "validate_cli") for n in validators()}, rest)


if __name__ == "__main__":
    sys.exit(cli())
