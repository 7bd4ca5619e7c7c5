"""Where a parameter-server worker's step goes, measured on its trainer threads: the next batch,
the sparse pull, compute, the push, and the meter (docs/reference/metrics.md#parameter-server-step-breakdown).

train_from_dataset runs a batch as the program's ops in order, inside C++ (Paddle 2.6.2's
DownpourLiteWorker::TrainFiles: `device_reader_->Next()`, then every op, then the scope's
clean-up), so nothing in Python sees a part start or end. Paddle's own instrument for it,
`train_from_dataset(debug=True)` (TrainFilesWithProfiler), prints each op's mean time to stderr
every 100 batches of thread 0 and forces one thread: not a window's figure. So the program gets
marks of its own: a `py_func` op (Paddle's Python-callback op) at each boundary between runs of
ops of one kind, and one before the first op. A mark stamps `time.perf_counter` for its thread;
what passed since that thread's previous mark is the part of the ops in between:

    reader   before the first op: since the previous batch's last op, i.e. the dataset channel's
             next batch and the trainer's end-of-batch bookkeeping (one C++ loop, not split)
    pull     distributed_lookup_table: the sparse rows fetched from the servers, a blocking RPC
    push     distributed_push_sparse (sparse gradients handed to the brpc client, not awaited)
             and send (dense gradients copied into the communicator's queue: it blocks while the
             queue is full, so a communicator that cannot keep up shows here)
    meter    the meter's py_func (fleetbench's own per-batch cost)
    compute  every other op: forward, backward, the local optimizer of GEO

The marks tile a thread's time, so a thread's parts add up to its time between two meter calls
exactly; the step is the meter's (measure/timing.py). With one dataset thread they agree to the
clock's reading; with T threads each part is thread time / T a step, and `other` is what the
threads' parts do not cover of the job's wall time (threads idle at the pass's edges).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

# the parts, in the order a batch runs them
PARTS = ("reader", "pull", "compute", "push", "meter")
PULL_OPS = frozenset({"distributed_lookup_table", "pull_sparse", "pull_sparse_v2", "recv"})
PUSH_OPS = frozenset({"distributed_push_sparse", "push_sparse", "push_sparse_v2", "push_dense", "send"})
METER_OPS = frozenset({"py_func"})  # the meter is the only py_func the scripts' programs hold


def op_part(op_type: str) -> str:
    if op_type in PULL_OPS:
        return "pull"
    if op_type in PUSH_OPS:
        return "push"
    return "meter" if op_type in METER_OPS else "compute"


def boundaries(op_types: list[str]) -> list[tuple[int, str]]:
    """Where marks go, as (index in the op list before which the mark is inserted, the part the
    ops since the previous mark belong to): one before the first op (the reader's), one at every
    change of part, one after the last op."""
    if not op_types:
        return []
    out = [(0, "reader")]
    for i in range(1, len(op_types) + 1):
        if i == len(op_types) or op_part(op_types[i]) != op_part(op_types[i - 1]):
            out.append((i, op_part(op_types[i - 1])))
    return out


class Marks:
    """The marks' clock: per thread, its last mark; per part, the seconds of committed batches.

    A thread's intervals wait in `pending` until the meter's next call on that thread commits them
    (once the window is open) or drops them (warm-up), so the window holds whole meter-to-meter
    stretches and nothing after the last batch's meter call."""

    def __init__(self, keep_spans: bool = False, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock, self.keep_spans = clock, keep_spans
        self.lock = threading.Lock()
        self.last: dict[int, float] = {}
        self.pending: dict[int, list] = {}
        self.totals = dict.fromkeys(PARTS, 0.0)
        self.spans: list[tuple] = []  # (part, start, end, step, thread), committed, with keep_spans
        self.open = False
        self.since = float("-inf")  # when the window opened: nothing before it is committed
        self.step = 0  # the meter's step count at its last call (a span's step, for traces)

    def hit(self, part: str) -> None:
        now, me = self.clock(), threading.get_ident()
        with self.lock:
            start = self.last.get(me)
            self.last[me] = now
            if start is not None:
                self.pending.setdefault(me, []).append((part, start, now))

    def meter_called(self, step: int, window_open: bool, window_start: float = float("-inf")) -> None:
        """The meter ran on this thread (its lock held): commit or drop this thread's intervals.
        `window_start`: when the meter's window opened (WindowTimer.window_start; it opens after
        the meter read the CPU counters, inside the meter's op): time before it is not committed."""
        me = threading.get_ident()
        with self.lock:
            waiting = self.pending.pop(me, [])
            if self.open:
                kept = [(part, max(start, self.since), end) for part, start, end in waiting if end > self.since]
                for part, start, end in kept:
                    self.totals[part] += end - start
                if self.keep_spans:
                    self.spans += [(part, start, end, step, me) for part, start, end in kept]
            if window_open and not self.open:
                self.since = window_start
            self.open, self.step = window_open, step


def instrument(program: Any, marks: Marks, fed: Any) -> int:
    """Insert the marks into `program`'s global block (the program train_from_dataset runs); the
    number inserted. Inserted from the end, so the indexes of the ones still to insert hold.
    `fed`: a variable the reader fills before the batch's first op (py_func wants an input or an
    output; a no-argument callable is handed nothing of it)."""
    import paddle
    block = program.global_block()
    places = boundaries([op.type for op in block.ops])
    for index, part in reversed(places):
        callable_id = paddle.static.nn.common.PyFuncRegistry(_marker(marks, part)).id
        block._insert_op(index, type="py_func", inputs={"X": [block.var(fed.name)]}, outputs={"Out": []},
                         attrs={"forward_callable_id": callable_id, "backward_callable_id": -1,
                                "backward_skip_vars": []})
    program._sync_with_cpp()
    return len(places)


def _marker(marks: Marks, part: str) -> Callable[[], None]:
    def mark() -> None:
        marks.hit(part)
    return mark
