"""`fleetbench data`: generate synthetic data sets and validate files.

    fleetbench data gen NAME [args]           write synthetic data for data set NAME
    fleetbench data validate criteo PATH...   check files against the Criteo format [--json]

Generators are a registry by module name: `fleetbench data gen NAME ...` runs `cli(argv)` of
`datasets/NAME.py`. A data set gets a generator by defining `cli(argv) -> int` in its own module
(as datasets/bert.py, wmt16.py and images.py do); nothing here needs editing.
"""
import argparse
import importlib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_DATA_SETS = {"__init__", "cli"}
# Validators by data set: (module, function taking argv).
VALIDATORS = {"criteo": ("datasets.criteo", "validate_cli")}


def generators() -> list:
    """Names of the data sets whose module defines a top-level `cli(argv)` (read, not imported,
    so listing them does not import paddle or numpy)."""
    names = []
    for path in sorted(HERE.glob("*.py")):
        if path.stem not in NOT_DATA_SETS and re.search(r"^def cli\(", path.read_text(), re.M):
            names.append(path.stem)
    return names


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
                        + "; validate " + "|".join(VALIDATORS))
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    args, rest = parser.parse_known_args(argv[:2])
    if args.name is None:
        parser.error("missing data set name")
    rest = argv[2:]
    if args.action == "gen":
        table = {name: (f"datasets.{name}", "cli") for name in generators()}
        return _dispatch("gen", args.name, table, rest)
    return _dispatch("validate", args.name, VALIDATORS, rest)


if __name__ == "__main__":
    sys.exit(cli())
