"""The benchmarks `fleetbench diagnose` runs on a node, one JSON object on stdout each.

    python -m fleetbench.diagnose.probe node [--seconds S]    matmul GFLOP/s, STREAM triad GB/s, train images/s
    python -m fleetbench.diagnose.probe recv HOST [--timeout S] prints `port N`, then the link's Gbit/s
    python -m fleetbench.diagnose.probe send HOST PORT [--seconds S]

Each figure is the best of a few short trials: the fastest trial is the one least disturbed by
anything else on the machine, and what is judged is what the node can do, not its luck. With each
figure goes what else used the machine while it was measured (`others_cpu_pct`: the share of the
machine's CPU time, steal included, spent outside this diagnosis's processes, which carry the
FLEETBENCH_JOB_ID diagnose gives them; fleetbench.measure.interference): a figure that breaks a
rule while others took the machine is re-measured, and never judged while they still do.
"""
import fleetbench  # noqa: F401, I001  (before numpy and paddle: sets the thread count to this node's cores)

import argparse
import json
import sys
import time


from fleetbench.comm import linkprobe
from fleetbench.machine import speed
from fleetbench.measure import interference

TRIAD_ELEMENTS = 1 << 23  # 3 float64 arrays of 64 MiB: far beyond any cache, so memory is what is timed
TRAIN_BATCH = 64  # 28x28 one-channel images a step: LeNet, paddle.vision's, as the MNIST benchmark's tiny model


def _best_rate(work: float, run, seconds: float) -> float:
    """Work per second of the fastest of 3 trials, each repeating `run` for ~seconds/3
    (machine/speed.best_rate: the run's speed probe times its workload by the same rule)."""
    return speed.best_rate(work, run, seconds, speed.PADDLE_GEMM_TRIALS)


def on_cpu():
    """paddle, with the CPU as its device: these probes time the node's CPU, and a CUDA build's
    default place is GPU 0 (framework._current_expected_place), so without this they timed GPU 0.
    The GPU probes (diagnose/gpu.py) choose each device themselves."""
    import paddle

    paddle.set_device("cpu")
    return paddle


def matmul_gflops(seconds: float) -> float:
    """fp32 matmul through Paddle on this node's CPU (the GPUs: diagnose/gpu.py); the same GEMM
    a CPU rank times for its MFU's peak (machine/speed.paddle_gemm_gflops)."""
    on_cpu()
    return speed.paddle_gemm_gflops(seconds)


def triad_gbps(seconds: float) -> float:
    """STREAM's triad a = b + s*c, in numpy (one thread: memory bandwidth of one stream, what one
    rank's data loading and optimizer step see), counted as STREAM counts it: 3 arrays moved.
    The kernel is the run's speed probe's (machine/speed.triad_kernel), here on float64 arrays of
    64 MiB: far beyond any cache."""
    triad, moved = speed.triad_kernel(TRIAD_ELEMENTS, "float64")
    # two passes over a (multiply, then add) and one each over b and c: 4 arrays' bytes per triad
    return _best_rate(moved / 1e9, triad, seconds)


def train_images_per_s(seconds: float) -> float:
    """Images a second of one process's training steps (forward, backward, Adam) of LeNet on a
    synthetic batch: what one rank of a small benchmark gets from the node, framework included,
    where matmul and triad time one kernel each."""
    paddle = on_cpu()
    model = paddle.vision.models.LeNet(num_classes=10)
    optimizer = paddle.optimizer.Adam(learning_rate=1e-3, parameters=model.parameters())
    images = paddle.rand([TRAIN_BATCH, 1, 28, 28], dtype="float32")
    labels = paddle.randint(0, 10, [TRAIN_BATCH, 1])
    loss_fn = paddle.nn.CrossEntropyLoss()

    def step() -> None:
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        float(loss)  # reads the loss: the step is done

    step()  # the first step pays for kernel selection and allocation
    return _best_rate(TRAIN_BATCH, step, seconds)


def cpu_waited() -> float:
    """Seconds this process has waited for a CPU while runnable (/proc/self/schedstat's run delay;
    a CPU quota's throttling counts there): a link end that waits much of the test is short of CPU,
    and its slow link is explained by that (fleetbench.diagnose.judging.blame). NaN where Linux does not say."""
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")


def others_pct(run, *args) -> tuple[object, float | None]:
    """run(*args), and the share of the machine's CPU time (%) others used meanwhile (None where
    /proc cannot say)."""
    start = interference.sample()
    value = run(*args)
    pct = interference.window(start, interference.sample())["interference_cpu_pct"]
    return value, None if pct is None else round(pct, 1)


def _node(seconds: float) -> dict:
    """The node's figures, each with what others used of the machine while it was measured."""
    from fleetbench.diagnose import gpu  # GPU figures on a CUDA build with GPUs

    out, others = {}, {}
    for name, run in (("matmul_gflops", matmul_gflops), ("triad_gbps", triad_gbps),
                      ("train_images_per_s", train_images_per_s)):
        out[name], others[name] = others_pct(run, seconds)
    return {**out, **gpu.node_figures(seconds), "others_cpu_pct": others}


def _share(waited: float, took: float) -> float | None:
    return round(waited / took, 3) if took > 0 and waited == waited else None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m fleetbench.diagnose.probe")
    sub = p.add_subparsers(dest="what", required=True)
    node = sub.add_parser("node")
    node.add_argument("--seconds", type=float, default=1.5)
    recv = sub.add_parser("recv")
    recv.add_argument("host")
    recv.add_argument("--timeout", type=float, default=30.0)
    send = sub.add_parser("send")
    send.add_argument("host")
    send.add_argument("port", type=int)
    send.add_argument("--seconds", type=float, default=1.0)
    args = p.parse_args(argv)
    if args.what == "node":
        out = _node(args.seconds)
    elif args.what == "recv":
        server = linkprobe.listen(args.host)
        print(f"port {server.getsockname()[1]}", flush=True)
        waited = cpu_waited()
        (received, took), others = others_pct(linkprobe.receive, server, args.timeout)
        out = {"link_gbps": received * 8 / took / 1e9 if took > 0 else None, "bytes": received,
               "cpu_wait": _share(cpu_waited() - waited, took), "others_cpu_pct": others}
    else:
        waited, start = cpu_waited(), time.perf_counter()
        sent, others = others_pct(linkprobe.stream, args.host, args.port, args.seconds)
        out = {"sent_bytes": sent, "cpu_wait": _share(cpu_waited() - waited, time.perf_counter() - start),
               "others_cpu_pct": others}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
