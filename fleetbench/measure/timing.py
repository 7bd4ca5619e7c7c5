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
from typing import Callable, Optional, Sequence

from fleetbench.measure import interference


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
    else ran in the window can be told apart from the job.
    """

    def __init__(self, warmup_steps: int, sync: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.perf_counter):
        self.warmup_steps = warmup_steps
        self.sync, self.clock = sync, clock
        self.measure_start = None
        self.cpu_start = self.cpu_end = None
        self.measured_samples = self.measured_units = self.measured_reader_s = 0.0
        if warmup_steps == 0:
            self.cpu_start = interference.sample()
        self._open_window()
        if warmup_steps == 0:
            self.measure_start = self.window_start

    def _read(self, now: Optional[float]) -> float:
        self.sync()
        return self.clock() if now is None else now

    def _open_window(self, now: Optional[float] = None):
        self.window_start = self._read(now)
        self.window_reader_s, self.window_steps, self.window_units = 0.0, 0, 0.0

    def step_done(self, step: int, samples: float, units: float, reader_s: float = 0.0) -> None:
        self.window_steps += 1
        self.window_units += units
        self.window_reader_s += reader_s
        if step > self.warmup_steps:
            self.measured_samples += samples
            self.measured_units += units
            self.measured_reader_s += reader_s

    def end_warmup(self, barrier: Callable[[], None] = lambda: None, now: Optional[float] = None) -> None:
        """After the last warm-up step: sync, let all ranks line up, start the measured window."""
        self.sync()
        barrier()
        self.cpu_start = interference.sample()
        self._open_window(now)
        self.measure_start = self.window_start

    def close_window(self, now: Optional[float] = None) -> dict:
        """Sync and return this logging window's figures; the next window starts now."""
        end = self._read(now)
        elapsed = max(end - self.window_start, 1e-12)
        steps = max(self.window_steps, 1)
        figures = {"ips": self.window_units / elapsed, "batch_cost_s": elapsed / steps,
                   "reader_cost_s": self.window_reader_s / steps}
        self._open_window(now)
        return figures

    def finish(self, now: Optional[float] = None) -> float:
        """Sync and return the measured window's wall time on this rank."""
        elapsed = self._read(now) - self.measure_start
        self.cpu_end = interference.sample()
        return elapsed
