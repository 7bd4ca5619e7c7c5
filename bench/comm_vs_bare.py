"""The comm benchmark's timed loop against a bare `paddle.distributed.all_reduce` loop.

Three loops run in the same job, on the same sizes, iterations and warm-up, in rotating order
(ABC, BCA, CAB..., so drift hits all alike): the comm benchmark's own code
(fleetbench.comm.collectives: Collective + time_op), a hand-written loop of
paddle.distributed.all_reduce on a zero tensor, and that bare loop again on a second tensor. The
third is an A/A control: bare against bare differs only by chance, so its ratio is the resolution
of this machine at that size. Each measurement is the slowest rank's mean per op; the figure per
size is the median over the repeats (--stat min: the minimum). Target: comm and bare agree within
2% at every size; a size whose A/A ratio is itself off by more than 2% cannot show that here, and
is marked so.

    python bench/comm_vs_bare.py [--nproc 2] [--repeats 15] [--iters 100] [--min-bytes 1024] [--max-bytes 33554432]
(it starts itself under Paddle's launcher; exit code 1 when a size misses the target)
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TARGET = 0.02
STATS = {"median": statistics.median, "min": min}


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=32 << 20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--iters", type=int, default=100)  # >= 50 ms a measurement above 64 KiB here
    parser.add_argument("--warmup-iters", type=int, default=5)
    parser.add_argument("--stat", choices=list(STATS), default="median",
                        help="figure per size over the repeats (min: timeit's choice; jitter only adds time)")
    return parser.parse_args(argv)


def bare_loop(tensor, warmup: int, iters: int) -> float:
    """What a user would write: warm up, line up, time `iters` all-reduces, sync."""
    import paddle
    import paddle.distributed as dist

    on_gpu = paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    for _ in range(warmup):
        dist.all_reduce(tensor)
    if on_gpu:
        paddle.device.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    if on_gpu:
        paddle.device.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def measure(args) -> int:
    """Inside the launcher: every rank runs both loops; rank 0 prints the comparison."""
    import fleetbench  # noqa: F401  (threads before paddle)
    import paddle

    from fleetbench.comm import collectives, opmath
    from fleetbench.train import loop

    cfg = collectives.CommConfig(op="all_reduce", iters=args.iters, warmup_iters=args.warmup_iters)
    peers = collectives.connect()
    slowest = loop.PaddleCommunicator().max
    worst, unresolved = 0.0, []
    for nbytes in opmath.sizes(args.min_bytes, args.max_bytes, args.factor):
        count = opmath.element_count("all_reduce", nbytes, peers.ranks, cfg.dtype)
        ours = collectives.Collective("all_reduce", count, peers, cfg)
        ours.load()
        ours.zero()
        loops = {"comm": lambda: collectives.time_op(ours, cfg.warmup_iters, cfg.iters, peers),
                 "bare": lambda t=paddle.zeros([count], dtype=cfg.dtype): bare_loop(t, cfg.warmup_iters, cfg.iters),
                 "bare2": lambda t=paddle.zeros([count], dtype=cfg.dtype): bare_loop(t, cfg.warmup_iters, cfg.iters)}
        names = list(loops)
        times = {name: [] for name in names}
        for rep in range(args.repeats):
            for name in names[rep % 3:] + names[:rep % 3]:
                times[name].append(slowest([loops[name]()])[0])
        t = {name: STATS[args.stat](v) for name, v in times.items()}
        ratio, aa = t["comm"] / t["bare"], t["bare2"] / t["bare"]
        resolved = abs(aa - 1) <= TARGET
        if resolved:
            worst = max(worst, abs(ratio - 1))
        else:
            unresolved.append(nbytes)
        if peers.rank == 0:
            print(f"{nbytes:>12} {t['comm'] * 1e6:>12.2f} {t['bare'] * 1e6:>12.2f} {ratio:>8.4f} {aa:>8.4f}"
                  f"{'' if resolved else '  (A/A off by more than the target: below resolution)'}", flush=True)
    if peers.rank == 0:
        verdict = "OK" if worst <= TARGET else "MISSED"
        below = f"; below resolution: {', '.join(map(str, unresolved))} B" if unresolved else ""
        print(f"COMM_VS_BARE worst deviation {worst:.2%} where resolved (target <= {TARGET:.0%}): {verdict}{below}",
              flush=True)
    return 0 if worst <= TARGET else 1


def launch(args) -> int:
    """Outside the launcher: start this script under it and show rank 0's output."""
    with tempfile.TemporaryDirectory() as log_dir:
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", log_dir,
               "--nproc_per_node", str(args.nproc), __file__, *sys.argv[1:]]
        env = dict(os.environ, GLOG_minloglevel="2", PYTHONWARNINGS="ignore")
        code = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True).returncode
        log = (Path(log_dir) / "workerlog.0").read_text(errors="replace")
    if code == 0 and "COMM_VS_BARE" not in log:
        code = 1  # no verdict: the job ended early
    if "): MISSED" in log:
        code = 1  # Paddle's launcher exits 0 even when a rank exits 1
    print(f"{args.nproc} ranks, all_reduce float32, {args.iters} timed + {args.warmup_iters} warm-up ops "
          f"per measurement, {args.stat} of {args.repeats}, slowest rank's time")
    print(f"{'bytes':>12} {'comm us':>12} {'bare us':>12} {'ratio':>8} {'A/A':>8}")
    print("\n".join(line for line in log.splitlines() if line[:1] == " " or line.startswith("COMM_VS_BARE")))
    return code


if __name__ == "__main__":
    arguments = parse()
    sys.exit(measure(arguments) if "PADDLE_TRAINER_ID" in os.environ else launch(arguments))
