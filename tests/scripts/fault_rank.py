"""A tiny real collective job (gloo all-reduce each step) whose chosen rank misbehaves.

Driven by env vars so launch tests need no big model:
  FAULT_RANK   which rank misbehaves (default -1: none)
  FAULT_KIND   exit | kill | hang | stop | rendezvous | none: exit(3), SIGKILL itself, block
               forever, SIGSTOP itself (state T, as `kill -STOP` does from outside); rendezvous:
               fail where init_parallel_env does, with the error gloo gives an overloaded host
               (Paddle's real failure cannot be caused on demand)
  FAULT_ONCE   1: fault only in a job's first attempt (FLEETBENCH_ATTEMPT unset or empty)
  FAULT_STEP   at which step (default 3); 0: before the first step, so no rank ever logs progress
  FAULT_WHEN   after (default): after that step's all-reduce and before its log line, so the
               faulty rank's last progress line is one step behind the others;
               before: at the start of the step, before its all-reduce, so every rank has logged
               the same steps (the logs cannot tell the faulty rank apart)
  SYNC         allreduce (default): paddle.distributed.all_reduce from Python (a gloo timeout
               raises RuntimeError: exit code 1); dp: a paddle.DataParallel layer whose backward
               hook all-reduces (a gloo timeout aborts the process: SIGABRT, as in ResNet50)
  STEPS        total steps (default 6); STEP_S: seconds of "work" per step (default 0.05)
  COLLECTIVE   0: no process group (ranks run independently, like async PS workers)
"""
import os
import signal
import sys
import threading
import time

from fleetbench.measure.timing import log_line

rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
fault_rank = int(os.environ.get("FAULT_RANK", "-1"))
kind = os.environ.get("FAULT_KIND", "none")
fault_step = int(os.environ.get("FAULT_STEP", "3"))
fault_when = os.environ.get("FAULT_WHEN", "after")
steps = int(os.environ.get("STEPS", "6"))
step_s = float(os.environ.get("STEP_S", "0.05"))
collective = world > 1 and os.environ.get("COLLECTIVE", "1") == "1"

if (kind == "rendezvous" and rank == fault_rank
        and not (os.environ.get("FAULT_ONCE") == "1" and os.environ.get("FLEETBENCH_ATTEMPT"))):
    print("RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
          "[127.0.0.1]:27683: Connection refused", file=sys.stderr, flush=True)
    sys.exit(1)

if collective:
    import paddle
    import paddle.distributed as dist

    paddle.set_device("cpu")
    dist.init_parallel_env()
    model = paddle.DataParallel(paddle.nn.Linear(16, 1)) if os.environ.get("SYNC") == "dp" else None


def maybe_fault(step, when):
    if rank == fault_rank and step == fault_step and (when == fault_when or step == 0):
        print(f"fault_rank: rank {rank} injects {kind} at step {step}", file=sys.stderr, flush=True)
        if kind == "exit":
            sys.exit(3)
        if kind in ("kill", "stop"):
            os.kill(os.getpid(), signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        if kind == "hang":
            threading.Event().wait()


def synchronise():
    if model is not None:
        model(paddle.ones([4, 16])).mean().backward()  # the reducer all-reduces in the hook
    else:
        dist.all_reduce(paddle.ones([1024], dtype="float32"))


maybe_fault(0, "before")
for step in range(1, steps + 1):
    t0 = time.perf_counter()
    maybe_fault(step, "before")
    time.sleep(step_s)
    if collective:
        synchronise()
    maybe_fault(step, "after")
    cost = time.perf_counter() - t0
    print(log_line(step, steps, 1.0 / step, 8 / cost, "samples/s", cost, 0.0), flush=True)
print(f"rank {rank} done", flush=True)
