"""Timing rules shared by every benchmark: the one place for warm-up exclusion, logging windows,
the per-window log line, and repeat statistics.

WindowTimer times both families: the collective loop calls it around each step; the
parameter-server meter (fleetbench.train.ps.meter) calls it from the py_func Paddle's trainer
threads run after every batch. Reducing figures across ranks (the slowest rank decides) is
fleetbench.measure.metrics'.
"""
import math
import statistics
import time
from typing import Callable, List, Optional, Sequence

from fleetbench.measure import interference, metrics


def summarize(values: Sequence[float]) -> dict:
    """n, mean, sample std (ddof=1; 0.0 for a single value), median, min, max."""
    values = [float(v) for v in values]
    if not values:
        return {"n": 0, "mean": None, "std": None, "median": None, "min": None, "max": None}
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def log_line(step: int, total: int, loss: Optional[float], ips: float, unit: str,
             batch_cost_s: float, reader_cost_s: float, **extra) -> str:
    """Paddle's benchmark log convention, one line per logging window."""
    loss_text = "nan" if loss is None or math.isnan(loss) else f"{loss:.4f}"
    line = (f"step {step}/{total} loss {loss_text} ips {ips:.1f} {unit} "
            f"avg_batch_cost {batch_cost_s:.5f} s avg_reader_cost {reader_cost_s:.5f} s")
    for key, value in extra.items():
        line += f" {key} {value:.4f}" if isinstance(value, float) else f" {key} {value}"
    return line


class WindowTimer:
    """Wall time of logging windows and of the measured window, warm-up excluded.

    Steps 1..warmup_steps are warm-up; the measured window runs from the end of the last warm-up
    step to the end of the last step, and counts the samples, units and reader time of the steps
    after warm-up. `sync` is called at every window edge so asynchronous device work lands in the
    window it belongs to (a no-op on CPU, device synchronize on GPU). A caller that read the clock
    at a step's end already, or reports after the step ended, passes that reading as `now`.

    The machine's CPU counters are sampled at the measured window's edges (measure/interference.py:
    `cpu_start`, `cpu_end`), just outside it where the timer reads the clock itself, so that what
    else ran in the window can be told apart from the job. With a `probe` (machine/speed.Probe's
    `measure`: the machine's speed on fixed work), it runs just outside both edges too
    (`probe_before`, `probe_after`); where the caller passed the edge's clock reading, the window
    starts after the probe instead, so the probe is never inside the window.

    Every step's wall time (end to end, as `step_done` is called; host time: on a GPU the device
    runs behind it, and only the window's edges sync) is kept in `step_s`, warm-up included;
    `measured_step_s` is the measured window's.
    """

    def __init__(self, warmup_steps: int, sync: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.perf_counter,
                 probe: Optional[Callable[[], List[float]]] = None):
        self.warmup_steps = warmup_steps
        self.sync, self.clock, self.probe = sync, clock, probe
        self.measure_start = None
        self.cpu_start = self.cpu_end = self.probe_before = self.probe_after = None
        self.measured_samples = self.measured_units = self.measured_reader_s = 0.0
        self.step_s: List[float] = []
        if warmup_steps == 0:
            self.probe_before = probe() if probe else None
            self.cpu_start = interference.sample()
        self._open_window()
        self.last_step_end = self.window_start
        if warmup_steps == 0:
            self.measure_start = self.window_start

    def _read(self, now: Optional[float]) -> float:
        self.sync()
        return self.clock() if now is None else now

    def _open_window(self, now: Optional[float] = None):
        self.window_start = self._read(now)
        self.window_reader_s, self.window_steps, self.window_units = 0.0, 0, 0.0

    def step_done(self, step: int, samples: float, units: float, reader_s: float = 0.0,
                  now: Optional[float] = None) -> None:
        now = self.clock() if now is None else now
        self.step_s.append(now - self.last_step_end)
        self.last_step_end = now
        self.window_steps += 1
        self.window_units += units
        self.window_reader_s += reader_s
        if self.measure_start is not None:  # after end_warmup (however late warm-up ended)
            self.measured_samples += samples
            self.measured_units += units
            self.measured_reader_s += reader_s

    def end_warmup(self, barrier: Callable[[], None] = lambda: None, now: Optional[float] = None,
                   step: Optional[int] = None) -> None:
        """After the last warm-up step (`step`: when warm-up ended where the constructor did not
        say, as steady.Steady decides): sync, probe, let all ranks line up, start the measured window."""
        self.warmup_steps = self.warmup_steps if step is None else step
        self.sync()
        if self.probe:  # every rank probes together, none of them training
            barrier()
            self.probe_before, now = self.probe(), None
        barrier()
        self.cpu_start = interference.sample()
        # the window opens after the counters' read (2-15 ms of /proc): a caller's earlier `now`
        # would put it inside (the PS meter's window of 1-3 s at tiny: up to 1 %)
        self._open_window(now if self.cpu_start is None else None)
        self.measure_start = self.last_step_end = self.window_start

    def close_window(self, now: Optional[float] = None) -> dict:
        """Sync and return this logging window's figures; the next window starts now."""
        end = self._read(now)
        elapsed = max(end - self.window_start, 1e-12)
        steps = max(self.window_steps, 1)
        figures = {"ips": self.window_units / elapsed, "batch_cost_s": elapsed / steps,
                   "reader_cost_s": self.window_reader_s / steps}
        self._open_window(now)
        return figures

    def finish(self, now: Optional[float] = None, barrier: Callable[[], None] = lambda: None) -> float:
        """Sync and return the measured window's wall time on this rank; then probe, once every
        rank is done (`barrier`), so that no rank's probe shares the CPU with another's last step."""
        elapsed = self._read(now) - self.measure_start
        self.cpu_end = interference.sample()
        if self.probe:
            barrier()
            self.probe_after = self.probe()
        return elapsed

    @property
    def measured_step_s(self) -> List[float]:
        """The measured window's step times, in order."""
        return self.step_s[self.warmup_steps:]

    @property
    def probe_figures(self) -> List[float]:
        """Every probe figure before and after the window, in metrics.PROBE_KEYS' order (NaN where
        not probed)."""
        return metrics.probe_row(self.probe_before, self.probe_after)


# ---------------------------------------------------------------- steady state and the window's length
SETTLE_BLOCK = 3  # steps a block: the median of 3 ignores one step's hiccup (a collection, a page fault)
SETTLE_PCT = 5.0  # warm-up is over when a block's median is within this of the block's before it
MAX_CALIBRATED = 50  # a calibrated window is at most this many times the preset's measured steps


def settled(step_s: Sequence[float], block: int = SETTLE_BLOCK, tolerance_pct: float = SETTLE_PCT) -> bool:
    """Whether the step time has stopped moving: the median of the last `block` steps is within
    `tolerance_pct` % of the median of the `block` steps before them. Medians, not means: one slow
    step (a collection, a log line's flush) is not a trend. Fewer than 2 blocks: not yet."""
    if len(step_s) < 2 * block:
        return False
    last = statistics.median(step_s[-block:])
    before = statistics.median(step_s[-2 * block:-block])
    return abs(last - before) <= tolerance_pct / 100 * before


def calibrated_steps(step_s: Sequence[float], window_s: float, min_steps: int,
                     block: int = SETTLE_BLOCK) -> int:
    """Measured steps enough for a window of `window_s` seconds at the settled step time (the
    median of the last `block` warm-up steps), as pyperf calibrates its loops from the first ones:
    never fewer than `min_steps` (the preset's fixed count), never more than MAX_CALIBRATED times
    it (a first estimate far too low cannot make a run endless). `window_s` 0: `min_steps`."""
    if window_s <= 0 or not step_s:
        return min_steps
    per_step = max(statistics.median(step_s[-block:]), 1e-9)
    return int(min(max(min_steps, math.ceil(window_s / per_step)), MAX_CALIBRATED * max(min_steps, 1)))


class Steady:
    """When warm-up ends and how many steps are measured, from the step times (`timing.settled`,
    `calibrated_steps`): warm-up runs at least `min_warmup` steps, then until the step time settled
    or `max_warmup` steps in all (`max_warmup` <= `min_warmup`: exactly `min_warmup`, the fixed
    warm-up of older records). The window is then calibrated to `window_s`."""

    def __init__(self, min_warmup: int, max_warmup: int, window_s: float, min_measured: int) -> None:
        self.min_warmup, self.max_warmup = min_warmup, max(min_warmup, max_warmup)
        self.window_s, self.min_measured = window_s, min_measured
        # at warm-up's end: settled (True), stopped at the cap (False), fixed warm-up (None)
        self.was_settled: Optional[bool] = None

    def warmup_over(self, step_s: Sequence[float]) -> bool:
        """This rank's view after len(step_s) warm-up steps (ranks of a synchronised job must
        agree before acting on it: the loop ends warm-up when every rank's view says so)."""
        done = len(step_s)
        if done < self.min_warmup:
            return False
        if self.max_warmup == self.min_warmup:
            return True
        return done >= self.max_warmup or settled(step_s)

    def measured_steps(self, step_s: Sequence[float]) -> int:
        """The window's steps after warm-up's `step_s`; records whether warm-up had settled."""
        self.was_settled = None if self.max_warmup == self.min_warmup else settled(step_s)
        return calibrated_steps(step_s, self.window_s, self.min_measured)
