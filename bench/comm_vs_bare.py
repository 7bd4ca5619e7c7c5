"""The comm benchmark's timed loop against a bare `paddle.distributed.all_reduce` loop.

Both loops run in the same job, on the same sizes, iterations and warm-up, alternately (ABAB...,
so drift hits both alike): the comm benchmark's own code (fleetbench.measure.collectives:
Collective + time_op) and a hand-written loop of paddle.distributed.all_reduce on a zero tensor.
Each measurement is the slowest rank's mean per op; the figure per size is the median over the
repeats. Target: the two agree within 2% at every size.

    python bench/comm_vs_bare.py [--nproc 2] [--repeats 9] [--iters 100] [--min-bytes 1024] [--max-bytes 33554432]
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


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=32 << 20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--iters", type=int, default=100)  # >= 50 ms a measurement above 64 KiB here
    parser.add_argument("--warmup-iters", type=int, default=5)
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

    from fleetbench.measure import collectives, comm
    from fleetbench.train import loop

    cfg = collectives.CommConfig(op="all_reduce", iters=args.iters, warmup_iters=args.warmup_iters)
    peers = collectives.connect()
    slowest = loop.Collective().max
    worst = 0.0
    for nbytes in comm.sizes(args.min_bytes, args.max_bytes, args.factor):
        count = comm.element_count("all_reduce", nbytes, peers.ranks, cfg.dtype)
        ours = collectives.Collective("all_reduce", count, peers, cfg)
        ours.load()
        ours.zero()
        bare = paddle.zeros([count], dtype=cfg.dtype)
        times = {"comm": [], "bare": []}
        for rep in range(args.repeats):
            order = ("comm", "bare") if rep % 2 == 0 else ("bare", "comm")
            for name in order:
                mine = (collectives.time_op(ours, cfg.warmup_iters, cfg.iters, peers) if name == "comm"
                        else bare_loop(bare, cfg.warmup_iters, cfg.iters))
                times[name].append(slowest([mine])[0])
        t_comm, t_bare = statistics.median(times["comm"]), statistics.median(times["bare"])
        worst = max(worst, abs(t_comm / t_bare - 1))
        if peers.rank == 0:
            print(f"{nbytes:>12} {t_comm * 1e6:>12.2f} {t_bare * 1e6:>12.2f} {t_comm / t_bare:>8.4f}", flush=True)
    if peers.rank == 0:
        verdict = "OK" if worst <= TARGET else "MISSED"
        print(f"COMM_VS_BARE worst deviation {worst:.2%} (target <= {TARGET:.0%}): {verdict}", flush=True)
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
          f"per measurement, median of {args.repeats}, slowest rank's time")
    print(f"{'bytes':>12} {'comm us':>12} {'bare us':>12} {'ratio':>8}")
    print("\n".join(line for line in log.splitlines() if line[:1] == " " or line.startswith("COMM_VS_BARE")))
    return code


if __name__ == "__main__":
    arguments = parse()
    sys.exit(measure(arguments) if "PADDLE_TRAINER_ID" in os.environ else launch(arguments))
