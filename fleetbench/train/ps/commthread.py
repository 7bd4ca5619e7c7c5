"""The PS client's own threads: the CPU time that Paddle 2.6.2's parameter-server client spends on
threads of its own, beside the trainer's, in a worker's measured window.

What runs there (paddle/fluid/distributed/ps/service/communicator/communicator.cc, brpc_ps_client.cc):
in async mode a worker's `send` ops only copy dense gradients into the communicator's queues
(AsyncCommunicator::Send); the communicator's MainThread merges what they hold and, on a thread
pool, pushes each table to the servers and pulls a dense table's new values back (RpcSendDense,
RpcRecvDense); GEO's communicator sends the k_steps' deltas and receives the tables back; brpc's
worker threads serialise, send and receive every request, the trainer's sparse pulls included.

Why CPU time and not Paddle's profiler: communicator.cc opens a `platform::RecordEvent` in each of
those functions, but Paddle's profiler (`paddle.profiler.Profiler`, CPU, FLAGS_host_trace_level=4)
over a CTR tiny pass recorded the main and the trainer threads only (132,378 events, every op's,
none of the communicator's), so it cannot measure this here. Instead: the threads that
`fleet.init_worker()` starts (the communicator's, its pool's, brpc's) are the ones present after
it and not before, and their CPU time at the window's edges comes from /proc/self/task/TID/schedstat
(nanoseconds on a CPU). A thread that ends inside the window takes its time with it (brpc's and the
communicator's live until the worker stops).
"""
from __future__ import annotations

import os


def threads() -> set[int]:
    """This process's thread ids now."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def cpu_seconds(tids: set[int]) -> float:
    """CPU seconds the threads have run so far (those still alive); NaN where /proc has no
    schedstat (not Linux, or a kernel without it) or no thread was given."""
    total, seen = 0, False
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as handle:
                total += int(handle.read().split()[0])
                seen = True
        except (OSError, ValueError, IndexError):
            continue  # the thread ended
    return total / 1e9 if seen else float("nan")
