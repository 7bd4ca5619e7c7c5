"""A tiny real collective job (gloo all-reduce each step) whose chosen rank misbehaves.

Driven by env vars so launch tests need no big model:
  FAULT_RANK   which rank misbehaves (default -1: none)
  FAULT_KIND   exit | kill | hang | none: exit(3), SIGKILL itself, or block forever
  FAULT_STEP   at which step (default 3); the fault comes after that step's all-reduce and before
               its log line, so the faulty rank's last progress line is one step behind the others;
               0: before the first step, so no rank ever logs progress (the others wait in step 1)
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
steps = int(os.environ.get("STEPS", "6"))
step_s = float(os.environ.get("STEP_S", "0.05"))
collective = world > 1 and os.environ.get("COLLECTIVE", "1") == "1"

if collective:
    import paddle
    import paddle.distributed as dist

    paddle.set_device("cpu")
    dist.init_parallel_env()



def maybe_fault(step):
    if rank == fault_rank and step == fault_step:
        print(f"fault_rank: rank {rank} injects {kind} at step {step}", file=sys.stderr, flush=True)
        if kind == "exit":
            sys.exit(3)
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "hang":
            threading.Event().wait()


maybe_fault(0)
for step in range(1, steps + 1):
    t0 = time.perf_counter()
    time.sleep(step_s)
    if collective:
        x = paddle.ones([1024], dtype="float32")
        dist.all_reduce(x)
    maybe_fault(step)
    cost = time.perf_counter() - t0
    print(log_line(step, steps, 1.0 / step, 8 / cost, "samples/s", cost, 0.0), flush=True)
print(f"rank {rank} done", flush=True)
