"""What one `py_func` op costs in a static program: the unit of the parameter-server step breakdown's
marks (fleetbench/train/ps/marks.py puts about 6 in a CTR step).

A small static program (an fc layer on a fed batch) is run ROUNDS x STEPS times through one
Executor with 0 and with K py_func ops appended, each calling the driver's own mark (a stamp of
time.perf_counter under the marks' lock, marks._marker); the rounds alternate (0, K, 0, K, ...) so a drifting machine
falls on both. Per-call cost = (median step with K - median step without) / K. Deterministic up
to the machine's noise, where bench/ps_overhead.py's job-level ratio drowns the marks in the
job's own variance (its intervals were 0.67-1.01 and 0.80-1.06, docs/reference/metrics.md).

    python bench/py_func_cost.py [--marks 6] [--steps 2000] [--rounds 6]
Prints the per-call cost in microseconds with the spread of its rounds, and what K marks cost
against a step of --step-ms (a CTR tiny step: 6.5 ms).
"""
import argparse
import statistics
import time

import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)
import numpy as np
import paddle

from fleetbench.train.ps import marks as ps_marks


def program(marks: int):
    """(main program, startup program) of an fc layer with `marks` py_func marks after it."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    clock = ps_marks.Marks()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [32, 64], "float32")
        y = paddle.static.nn.fc(x, 64)
        for _ in range(marks):
            # the driver's own mark callable (no arguments: Paddle hands it nothing of y)
            paddle.static.py_func(func=ps_marks._marker(clock, "compute"), x=y, out=None)
        paddle.mean(y)
    return main, startup


def step_us(exe, main, feed: dict, steps: int) -> float:
    """Median of `steps` exe.run times, µs."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        exe.run(main, feed=feed, fetch_list=[])
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--marks", type=int, default=6)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--step-ms", type=float, default=6.5, help="the step the marks are priced against")
    args = ap.parse_args()
    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    built = {k: program(k) for k in (0, args.marks)}
    for _, startup in built.values():
        exe.run(startup)
    feed = {"x": np.random.default_rng(0).random((32, 64), dtype=np.float32)}
    for main_prog, _ in built.values():  # warm-up: the executor's first run of a program builds it
        step_us(exe, main_prog, feed, 200)
    per_call = []
    for r in range(args.rounds):
        bare = step_us(exe, built[0][0], feed, args.steps)
        marked = step_us(exe, built[args.marks][0], feed, args.steps)
        per_call.append((marked - bare) / args.marks)
        print(f"round {r + 1}: step {bare:.1f} µs bare, {marked:.1f} µs with {args.marks} marks: "
              f"{per_call[-1]:.1f} µs a mark")
    cost = statistics.median(per_call)
    print(f"py_func mark: {cost:.1f} µs a call (rounds {min(per_call):.1f}-{max(per_call):.1f}); "
          f"{args.marks} a step cost {args.marks * cost / (args.step_ms * 1e3):.1%} of a {args.step_ms} ms step")


if __name__ == "__main__":
    main()
