"""The results database at scale (issue 48): constructed records (history/synthetic.py, seeded)
written as JSONL, imported into a database, then `history` and `history --regressions` read it;
each command's wall time printed. Run it on a quiet machine:

    python bench/history_store.py                          # 100,000 records, a SQLite file
    python bench/history_store.py --records 2000           # a quick check that it runs
    python bench/history_store.py --db postgresql://USER@HOST/DB
    python bench/history_store.py --throwaway-postgres     # a server of its own (tests/pgserver.py; root)

Records: `--cells` cells (a cell: one benchmark shape) of equal length, every `--every`-th with a
slowdown of 12 % at a seeded position where NCCL changes 2.18.3 → 2.19.3; the regressions listing
must name exactly those cells, which the script checks. Each step is printed with its wall and CPU
time (all its processes'), its target (issue 48: under 10 s; the charts have none, docs/guide/history.md
says why, and get their cost a chart) and pass or FAIL, between the machine's load average before
and after: a wall time is the machine's only when nothing else ran. Exit 1 when the regressions
listed are not the ones constructed or a target was missed.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from fleetbench.history import synthetic  # noqa: E402
from fleetbench.store import results  # noqa: E402

BENCHMARKS = ("resnet50", "bert", "ctr", "word2vec", "transformer")
METHODS = ("bsp", "mgwfbp", "dgc", "localsgd", "asp")


def write(directory: str, records: int, cells: int, every: int, files: int) -> tuple[list[str], int]:
    """JSONL files holding `records` constructed records; (paths, cells with a slowdown)."""
    import numpy as np
    rng = np.random.default_rng(48)
    per_cell = max(8, records // cells)
    paths = [os.path.join(directory, f"runs-{i}.jsonl") for i in range(files)]
    handles = [open(p, "w", encoding="utf-8") for p in paths]
    slowed = 0
    try:
        for c in range(cells):
            shape = {"benchmark": BENCHMARKS[c % len(BENCHMARKS)], "method": METHODS[(c // 5) % len(METHODS)],
                     "nodes": 1 + c // 25}
            slow = c % every == 0
            at = int(rng.integers(per_cell // 4, 3 * per_cell // 4)) if slow else None
            slowed += slow
            for i, record in enumerate(synthetic.series(c, per_cell, at, -12.0, cv=0.02, **shape,
                                                        changed={"nccl": ("2.18.3", "2.19.3")} if slow else None)):
                handles[i % files].write(results.dumps(record) + "\n")
    finally:
        for handle in handles:
            handle.close()
    return paths, slowed


TARGET_S = 10.0  # issue 48: import, `history` and `regressions` of 100,000 records each under 10 s on 2 cores


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the command's processes, its stdout) of `fleetbench ARGV...`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fleetbench", *argv], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO), check=False)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        sys.exit(f"bench/history_store.py: {' '.join(argv[:2])} failed ({done.returncode}): "
                 f"{done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu, done.stdout


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--cells", type=int, default=250)
    p.add_argument("--every", type=int, default=10, help="every Nth cell has a slowdown (default 10)")
    p.add_argument("--files", type=int, default=10, help="JSONL files the records are spread over")
    p.add_argument("--db", help="database URL (default: a SQLite file in a temporary directory)")
    p.add_argument("--throwaway-postgres", action="store_true",
                   help="start a PostgreSQL server of its own for the run (tests/pgserver.py: Debian's postgresql, root)")
    args = p.parse_args()
    if args.throwaway_postgres:
        if args.db:
            p.error("--db and --throwaway-postgres: give one")
        sys.path.insert(0, os.path.join(REPO, "tests"))
        import pgserver
        why = pgserver.missing()
        if why:
            p.error(f"--throwaway-postgres: {why}")
        with pgserver.server() as url:
            return run(args, url)
    return run(args, args.db)


def run(args: argparse.Namespace, db_url: str | None) -> int:
    """Every step against `db_url` (None: a SQLite file of its own); 0 when all passed."""
    with tempfile.TemporaryDirectory(prefix="fbhist.") as tmp:
        db = db_url or f"sqlite:///{os.path.join(tmp, 'store.db')}"
        paths, slowed = write(tmp, args.records, args.cells, args.every, args.files)
        images = os.path.join(tmp, "img")
        # (name, argv, the target it is held to: None for the charts, docs/guide/history.md says why)
        steps = [("import", ["results", "import", *paths, "--db", db], TARGET_S),
                 ("import again (nothing new)", ["results", "import", *paths, "--db", db], TARGET_S),
                 ("history --json", ["history", "--db", db, "--json"], TARGET_S),
                 ("history (text and charts)", ["history", "--db", db, "--images", images], None),
                 ("history --regressions", ["history", "--db", db, "--regressions"], TARGET_S)]
        print(f"{args.records} records requested, {args.cells} cells, {slowed} with a 12 % slowdown; {db}")
        print(f"before: {load()} (the wall times are the machine's only when it is otherwise idle)")
        out, missed = "", []
        for name, argv, target in steps:
            took, cpu, out = timed(argv)
            line = f"  {name:<28} {took:8.2f} s wall {cpu:8.2f} s CPU"
            if target is None:
                charts = len([f for f in os.listdir(images) if f.endswith(".png")]) if os.path.isdir(images) else 0
                line += (f"  {charts} charts, {took / charts:.3f} s a chart" if charts else "  no chart") + \
                    "; no target (docs/guide/history.md)"
            else:
                line += f"  target < {target:g} s: {'pass' if took < target else 'FAIL'}"
                if took >= target:
                    missed.append(name)
            print(line)
        print(f"after: {load()}")
        found = int(out.split(" regression(s)", 1)[0])
        print(f"regressions listed: {found} (constructed: {slowed})")
        if missed:
            print(f"missed the {TARGET_S:g} s target: {', '.join(missed)}")
        return 0 if found == slowed and not missed else 1


if __name__ == "__main__":
    sys.exit(main())
