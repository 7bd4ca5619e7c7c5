"""Run test files again and again, quiet and beside a CPU hog, and count what fails (issue 43).

    python tools/flake_hunt.py tests/job/test_launch.py tests/job/test_blame.py --runs 3 --load hog
    python tools/flake_hunt.py --tier job --runs 10 --load both --json log/flakes.json

Each run of a file is one pytest session (`-p no:cacheprovider`, its own --basetemp); `--load hog`
starts one busy loop per core for the whole session (what a neighbour does to a 2-core machine),
`quiet` starts none, `both` alternates them. The table says, per file and load: runs, failed runs,
and the failed tests' ids; --json keeps every run (file, load, seconds, exit code, failed ids, the
tail of the output) so a failure's cause can be read afterwards. Run it on a machine where nothing
else runs: the hog is the only load it means to measure.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIERS = {"job": "tests/job", "root": "tests/root", "unit": "tests/unit"}
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


@contextlib.contextmanager
def hog(busy: bool) -> Iterator[None]:
    """One busy loop per core while the block runs (none when not busy)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(os.cpu_count() or 1)] if busy else []
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


def run_file(path: str, busy: bool, python: str, marks: str | None) -> dict:
    """One pytest session of one file; what it said."""
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", tempfile.mkdtemp(prefix="fbflake."),
           "-rfE", path] + (["-m", marks] if marks else [])
    t0 = time.monotonic()
    with hog(busy):
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    out = p.stdout + p.stderr
    return {"file": path, "load": "hog" if busy else "quiet", "seconds": round(time.monotonic() - t0, 1),
            "exit": p.returncode, "failed": sorted(set(FAILED.findall(out))), "tail": out.splitlines()[-40:]}


def table(runs: list[dict]) -> list[str]:
    lines = [f"{'file':<44} {'load':<6} {'runs':>4} {'failed':>6}  failed tests"]
    keys = sorted({(r["file"], r["load"]) for r in runs})
    for path, load in keys:
        mine = [r for r in runs if (r["file"], r["load"]) == (path, load)]
        bad = [r for r in mine if r["exit"] not in (0, 5)]
        ids = sorted({t.split("::", 1)[-1] for r in bad for t in r["failed"]})
        lines.append(f"{path:<44} {load:<6} {len(mine):>4} {len(bad):>6}  {', '.join(ids)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="test files (default: every file of --tier)")
    ap.add_argument("--tier", choices=sorted(TIERS), help="every test file of a tier")
    ap.add_argument("--runs", type=int, default=3, help="runs of each file under each load (default 3)")
    ap.add_argument("--load", choices=("quiet", "hog", "both"), default="both")
    ap.add_argument("--python", default=sys.executable, help="the interpreter with fleetbench and Paddle")
    ap.add_argument("-m", dest="marks", help="a pytest marker expression (e.g. 'not ps')")
    ap.add_argument("--json", help="keep every run here")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs {args.runs}: expected a count of at least 1")
    files = args.files or (sorted(str(p.relative_to(REPO)) for p in (REPO / TIERS[args.tier]).glob("test_*.py"))
                           if args.tier else ap.error("name test files or a --tier"))
    loads = {"quiet": [False], "hog": [True], "both": [False, True]}[args.load]
    runs = []
    for i in range(args.runs):
        for path in files:
            for busy in loads:
                runs.append(run_file(path, busy, args.python, args.marks))
                r = runs[-1]
                print(f"run {i + 1}/{args.runs} {path} {r['load']}: exit {r['exit']} in {r['seconds']} s"
                      + (f", failed {r['failed']}" if r["failed"] else ""), flush=True)
                if args.json:
                    Path(args.json).write_text(json.dumps(runs, indent=1))
    print("\n".join(table(runs)))
    return 1 if any(r["exit"] not in (0, 5) for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
