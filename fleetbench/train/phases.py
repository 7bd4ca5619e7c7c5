"""Where a collective rank's step goes, measured: reader, forward, backward, gradient
communication, optimizer, and what no part explains (docs/reference/metrics.md#step-breakdown).

The loop and the methods' steps hand one `Phases` object the moments they already know (a step's
start and end, the reader's wait) and run their parts inside `span(name)`; nothing else changes.
Which instrument measures what:
- step, reader, forward, backward, optimizer: `time.perf_counter` at the edges the loop and
  `methods.Steps` cross, the device synchronised at each edge (a no-op on CPU; on a GPU the
  part's queued kernels land in the part that queued them);
- gradient communication of bsp, fp16_allreduce and none: a span around the method's gradient
  average after backward (Paddle's fused_allreduce_gradients, or the float16 twin: packing,
  casts and the all-reduce calls);
- gradient communication of wfbp, mgwfbp and grad_merge (DataParallel's C++ reducer): Paddle's
  own gradient hooks. Each trainable parameter gets a reduce hook (`Tensor._register_backward_hook`,
  the hook kind the reducer itself registers, run after the gradient is accumulated) *before*
  DataParallel is built and one *after*; hooks run in registration order, so the time between the
  two is the time inside the reducer's hook: the bucket's concatenation, its all-reduce call and
  the split back when that gradient completes a bucket. No device sync there: on a GPU it is the
  time to queue the all-reduce (NCCL's transfer runs beside it), on CPU with gloo the whole
  all-reduce, which `ProcessGroupGloo::AllReduce` runs to the end on the calling thread.
- waiting for peers: clock-free, from every rank's time inside the same collective call (the
  n-th of a step on every rank: their backward graphs and buckets are one): what a rank spent
  there beyond the least any rank spent is its wait for the last to arrive.

`threading.get_ident()` of each communication span says on which thread it ran; one on the thread
that runs the step ran in place of computing (blocking), whatever its time stamps.
"""
from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

if TYPE_CHECKING:
    from fleetbench.measure import metrics

# the parts of a step, in the order they run; "other" is the step time no part covers
PARTS = ("reader", "forward", "backward", "comm", "optimizer")
# the parts must explain the measured step to within this share (the rest is "other")
TOLERANCE = 0.05


class Phases:
    """One rank's spans: (name, start, end, step, thread), perf_counter seconds."""

    def __init__(self, warmup_steps: int, sync: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.warmup_steps, self.sync, self.clock = warmup_steps, sync, clock
        self.spans: list[tuple] = []
        self.steps: list[tuple] = []  # (step, start, end)
        self.step = 0
        self.thread = threading.get_ident()  # the thread that runs the steps
        self._start = 0.0
        self._ready: dict[int, float] = {}  # parameter index -> when its gradient was accumulated

    # ---------------------------------------------------------------- what the loop calls
    def begin(self, step: int, start: float) -> None:
        self.step, self._start = step, start

    def add(self, name: str, start: float, end: float) -> None:
        if self.step:  # step 0: a loop that does not feed the phases (the epoch schedule) keeps nothing
            self.spans.append((name, start, end, self.step, threading.get_ident()))

    def end(self) -> None:
        self.sync()
        self.steps.append((self.step, self._start, self.clock()))

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        start = self.clock()
        try:
            yield
        finally:
            self.sync()
            self.add(name, start, self.clock())

    # ---------------------------------------------------------------- the reducer's hooks
    def watch_before(self, params: Sequence) -> None:
        """Hooks that run before the reducer's: call before DataParallel registers its own."""
        for i, param in enumerate(params):
            param._register_backward_hook(functools.partial(self._mark, i))

    def watch_after(self, params: Sequence) -> None:
        """Hooks that run after the reducer's: call once DataParallel is built."""
        for i, param in enumerate(params):
            param._register_backward_hook(functools.partial(self._reduced, i))

    def _mark(self, i: int) -> None:
        self._ready[i] = self.clock()

    def _reduced(self, i: int) -> None:
        start = self._ready.pop(i, None)
        if start is not None:
            self.add("comm", start, self.clock())

    # ---------------------------------------------------------------- summaries
    def measured(self) -> tuple[list, list]:
        """(steps, spans) of the measured window (warm-up steps left out)."""
        steps = [s for s in self.steps if s[0] > self.warmup_steps]
        return steps, [s for s in self.spans if s[3] > self.warmup_steps]

    def comm_durations(self) -> list[float]:
        """Seconds inside each gradient-communication call of the measured steps, in call order."""
        return [end - start for name, start, end, _, _ in self.measured()[1] if name == "comm"]


def step_parts(steps: list, spans: list, main_thread: int) -> dict:
    """Seconds per part summed over `steps`; backward is its wall time less the communication
    inside it (which `comm` counts), so the parts and `other` add up to the steps' time."""
    total = {p: 0.0 for p in PARTS}
    total.update(step=0.0, comm_in_backward=0.0, comm_blocking=0.0)
    by_step: dict[int, list] = {}
    for span in spans:
        by_step.setdefault(span[3], []).append(span)
    for step, start, end in steps:
        total["step"] += end - start
        mine = by_step.get(step, [])
        backward = [(s, e) for n, s, e, _, _ in mine if n == "backward"]
        for name, s, e, _, thread in mine:
            if name == "comm":
                inside = any(bs <= s and e <= be for bs, be in backward)
                total["comm_in_backward"] += (e - s) if inside else 0.0
                total["backward"] -= (e - s) if inside else 0.0
                total["comm_blocking"] += (e - s) if thread == main_thread else 0.0
            total[name] = total.get(name, 0.0) + (e - s)
    total["other"] = total["step"] - sum(total[p] for p in PARTS)
    return total


def waits(durations_by_rank: list[list[float]]) -> list[float]:
    """Each rank's wait for its peers, summed over the calls: its time inside a call beyond the
    least any rank spent in that call. Ranks that made different numbers of calls (not one
    collective schedule) give NaN: nothing can be paired."""
    if len({len(d) for d in durations_by_rank}) != 1:
        return [math.nan] * len(durations_by_rank)
    least = [min(call) for call in zip(*durations_by_rank)]
    return [sum(d - m for d, m in zip(mine, least)) for mine in durations_by_rank]


# the per-rank row of the record: names with their unit in the record's `units`
ROW = ("step", *PARTS, "comm_wait", "comm_in_backward", "comm_blocking", "other")


def breakdown(phases: Phases, comm: metrics.Communicator, rank: int) -> dict:
    """The record's `step_breakdown` (every rank calls it together; `comm`: metrics.Communicator):
    ms per measured step of each part on every rank, and whether they add up."""
    steps, spans = phases.measured()
    parts = step_parts(steps, spans, phases.thread)
    # Every rank gathers as many calls as the rank with most (a step of its own making, e.g. the GPT
    # benchmark's sharded step, has none in the reducer; Paddle refuses a 0-size all_gather).
    own = phases.comm_durations()
    longest = int(comm.max([float(len(own))])[0])
    durations = comm.gather(list(own) + [0.0] * (longest - len(own))) if longest else []
    parts["comm_wait"] = waits(durations)[rank] if durations else 0.0
    count = max(1, len(steps))
    mine = [1000 * parts[name] / count for name in ROW]
    rows = [dict(zip(ROW, row)) for row in comm.gather(mine)]
    for row in rows:
        row["covered"] = 1 - abs(row["other"]) / row["step"] if row["step"] > 0 else math.nan
    return {"units": "ms per measured step", "tolerance": TOLERANCE, "steps": len(steps),
            "adds_up": all(row["covered"] >= 1 - TOLERANCE for row in rows), "ranks": rows}
