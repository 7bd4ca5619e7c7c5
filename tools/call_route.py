"""The route a command takes through fleetbench's modules, call by call: how often it comes back to a
module it already left (a concept split over modules that call each other back and forth).

    python tools/call_route.py explain results/reference/dle-paddle-bert-dgxa100.jsonl --published --validate nodes=1
    python tools/call_route.py --records 2 explain TABLE --published   # the table's first 2 records only

The command runs in this process under a profiler that notes the fleetbench module executing after
every call and every return (a module's body, run by an import, is not counted). Consecutive events in one module are one visit; a loop's repetitions
are counted once (a transition from module A to module B already seen is not counted again), so
the route is the one a reader follows through the code. Printed: the modules and rooms visited,
the returns (transitions into a module entered before), and the modules entered most often.
"""
import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = str(REPO / "fleetbench") + "/"


def _module(filename: str) -> str | None:
    if not filename.startswith(PACKAGE):
        return None
    return filename[len(PACKAGE):].removesuffix(".py").removesuffix("/__init__")


def traced(argv: list[str]) -> list[str]:
    """The modules in the order the command executes in them (consecutive repeats collapsed)."""
    import importlib

    from fleetbench import cli
    seen: list[str] = []
    importlib.import_module(cli.SUBCOMMANDS[argv[0]][0])  # imported first: what its import runs is no step

    def profile(frame, event, arg):
        if event in ("call", "return"):
            current = frame if event == "call" else frame.f_back
            # a module's body running is an import, not a step of the route
            module = _module(current.f_code.co_filename) if current and current.f_code.co_name != "<module>" else None
            if module and (not seen or seen[-1] != module):
                seen.append(module)

    sys.setprofile(profile)
    try:
        cli.main(argv)
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    return seen


def route(sequence: list[str]) -> tuple[list[tuple[str, str]], collections.Counter]:
    """Distinct transitions in first-seen order, and how often each module is entered along them."""
    edges, entered = [], collections.Counter()
    for a, b in zip(sequence, sequence[1:]):
        if (a, b) not in edges:
            edges.append((a, b))
            entered[b] += 1
    return edges, entered


# Rooms every command passes through on its way (the subcommand table, the shared parser, the
# package root) and the vocabulary and pure tables every room reads: left out of the room walk.
THROUGH = ("cli", "cmdline", "__init__", "__main__", "measure", "emulate")


def room_walk(sequence: list[str]) -> list[str]:
    """The rooms the command works in, in turn, a room named again only when it is re-entered."""
    walk: list[str] = []
    for module in sequence:
        room = module.split("/")[0]
        if room not in THROUGH and (not walk or walk[-1] != room):
            walk.append(room)
    return walk


def _first_records(argv: list[str], n: int, tmp: str) -> list[str]:
    """argv with each JSONL file cut to its first n records."""
    out = []
    for arg in argv:
        if arg.endswith(".jsonl") and Path(arg).exists():
            lines = [l for l in Path(arg).read_text().splitlines() if l.strip()][:n]
            cut = Path(tmp) / Path(arg).name
            cut.write_text("\n".join(lines) + "\n")
            arg = str(cut)
        out.append(arg)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, help="cut each results file to its first N records")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        argv = _first_records(args.command, args.records, tmp) if args.records else args.command
        sys.stdout = open("/dev/null", "w")
        sequence = traced(argv)
        sys.stdout = sys.__stdout__
    edges, entered = route(sequence)
    first, returns = [sequence[0]], 0
    for _, b in edges:
        if b in first:
            returns += 1
        else:
            first.append(b)
    rooms = sorted({m.split("/")[0] for m in first})
    walk = room_walk(sequence)
    summary = {"modules": len(first), "rooms": rooms, "transitions": len(edges), "returns": returns,
               "most_entered": entered.most_common(5), "room_walk": walk}
    print(json.dumps(summary) if args.json else
          f"{len(first)} modules in {len(rooms)} rooms ({', '.join(rooms)}); {len(edges)} distinct transitions, "
          f"{returns} returns to a module already left; most entered: "
          + ", ".join(f"{m} {n}" for m, n in entered.most_common(5))
          + f"\nthe rooms in turn (cli, cmdline, the package root, measure and emulate's tables left out): {' -> '.join(walk)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
