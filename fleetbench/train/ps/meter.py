"""The parameter-server worker's step meter: Paddle's trainer threads call it after every batch
(through a py_func op appended to the program), and it feeds the suite's one timer, WindowTimer.

train_from_dataset runs whole passes inside C++, so the meter is where a worker sees its steps:
it counts rows (examples), units and loss, logs every `log_every` batches, ends warm-up after
`warmup_steps` batches (or, with `measure.settle_steps`, once the step time settled: timing.Steady,
each worker on its own: an asynchronous job has nothing to agree on), and takes the window's end at
the last batch (not when the pass returns). The speed probe runs outside the passes (driver.py):
inside one, a worker's probe would share the CPU with the other workers' steps.
"""
from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

from fleetbench.measure import metrics
from fleetbench.measure.timing import Steady, WindowTimer, log_line
from fleetbench.train import run
from fleetbench.train.ps import commthread, servers
from fleetbench.train.ps.paddle26 import say

if TYPE_CHECKING:
    import numpy as np

    from fleetbench.train.ps.config import PSConfig


class StepMeter:
    def __init__(self, cfg: PSConfig, worker: int, unit: str = "examples/s") -> None:
        self.cfg, self.worker, self.unit = cfg, worker, unit
        self.total_hint, self.auc_stats, self.auc_start = 0, None, None
        self.lock = threading.Lock()
        self.delay_s = cfg.debug.delay_ms / 1000 if cfg.debug.delay_rank == worker else 0.0
        self.step = 0
        self.loss_sum = 0.0  # loss x rows over the measured window (the mean log loss for CTR)
        self.loss_first = self.loss_last = None
        self.marks = None  # ps/marks.Marks: the parts of each step, when attached
        self.server_pids: list = []  # the servers on this machine (ps/servers.py), sampled at the window's edges
        self.server_cpu_start: list = []
        self.server_cpu: list = []  # CPU seconds of each server in the window (NaN: not seen)
        self.client_tids: set = set()  # the PS client's own threads (ps/commthread.py)
        self.client_cpu_start = self.client_cpu = float("nan")
        self.window_ns = [0, 0]  # the window's edges on time.time_ns (the communicator's events' clock)
        self.begin()

    def begin(self) -> None:
        """Training starts now (the first logging window, and the measured one without warm-up)."""
        self.timer = WindowTimer(self.cfg.warmup_steps)
        # the window's length is whole passes' (train_from_dataset cannot stop inside one): no step
        # count is calibrated; measure.window_s adds passes instead (driver.train)
        self.steady = Steady(self.cfg.warmup_steps, self.cfg.measure.settle_steps, 0.0, 1)
        self.warming = self.cfg.warmup_steps > 0
        self.last = self.timer.window_start
        self.window_loss = self.window_rows = 0.0
        if not self.warming:
            self._window_opens()

    def attach(self, marks: Any, server_pids: list, client_tids: set) -> None:
        """Feed `marks` (ps/marks.Marks) at every batch and sample the servers' and the PS client's
        threads' CPU time at the window's edges; call before `begin`."""
        self.marks, self.server_pids, self.client_tids = marks, server_pids, client_tids

    def _window_opens(self) -> None:
        self.window_ns[0] = time.time_ns()
        self.server_cpu_start = servers.cpu_seconds(self.server_pids)
        self.client_cpu_start = commthread.cpu_seconds(self.client_tids)
        if self.marks is not None and not self.marks.open:  # warmup_steps 0: open from the start
            self.marks.open, self.marks.since = True, self.timer.window_start

    def window_so_far_s(self) -> float:
        """Seconds from the window's start to the last batch so far (0 while warming up)."""
        with self.lock:
            return 0.0 if self.warming else self.last - self.timer.measure_start

    def snapshot_auc(self) -> list[np.ndarray]:
        import numpy as np
        import paddle
        scope = paddle.static.global_scope()
        return [np.array(scope.find_var(v.name).get_tensor()) for v in self.auc_stats]

    def __call__(self, *tensors: Any) -> None:
        try:
            self._step(*tensors)
        except BaseException:  # Paddle reports a py_func failure only as "std::exception"
            import traceback
            traceback.print_exc()
            raise

    def _step(self, rows_var: Any, loss_var: Any, units_var: Any = None) -> None:
        import numpy as np
        if self.delay_s:
            time.sleep(self.delay_s)  # test-only: makes this worker the slow one
        rows = int(np.array(rows_var).shape[0])
        units = float(np.array(units_var).sum()) if units_var is not None else float(rows)
        loss = float(np.array(loss_var).reshape(-1)[0])
        with self.lock:
            self.last = now = time.perf_counter()
            self.step += 1
            self.timer.step_done(self.step, rows, units, now=now)
            self.window_loss += loss * rows
            self.window_rows += rows
            if not self.warming:
                self.loss_sum += loss * rows
            if self.step % self.cfg.log_every == 0:
                self._log(now)
            if self.warming and self.steady.warmup_over(self.timer.step_s):
                self.warming = False
                self.steady.measured_steps(self.timer.step_s)  # notes whether it settled
                self.timer.end_warmup(now=now, step=self.step)
                self._window_opens()
                if self.auc_stats:
                    self.auc_start = self.snapshot_auc()
            self.window_ns[1] = time.time_ns()
            if self.marks is not None:  # the step's parts since this thread's last batch
                self.marks.meter_called(self.step, not self.warming, self.timer.window_start)

    def _log(self, now: float) -> None:
        loss = self.window_loss / max(self.window_rows, 1)
        self.loss_first = loss if self.loss_first is None else self.loss_first
        self.loss_last = loss
        window = self.timer.close_window(now=now)
        # train_from_dataset reads inside the step: there is no reader time to show
        say(log_line(self.step, self.total_hint, loss, window["ips"], self.unit, window["batch_cost_s"], math.nan))
        self.window_loss = self.window_rows = 0.0

    def finish(self, peak_mem_mib: float) -> metrics.RankFigures:
        """This worker's measured window; ValueError when warm-up used every step."""
        with self.lock:
            if self.timer.window_steps:
                self._log(self.last)
            measured = self.step - self.timer.warmup_steps
            if measured <= 0 or self.warming:
                raise ValueError(f"warm-up ({self.timer.warmup_steps} steps) used all {self.step} steps; "
                                 f"lower warmup_steps (or measure.settle_steps), add passes or data")
            elapsed_s = self.timer.finish(now=self.last)
            end = servers.cpu_seconds(self.server_pids)
            self.server_cpu = [e - s for e, s in zip(end, self.server_cpu_start)]
            self.client_cpu = commthread.cpu_seconds(self.client_tids) - self.client_cpu_start
            # the CPU counters' end is read now, when the pass returned, a few ms after the last batch
            return metrics.RankFigures(
                elapsed_s=elapsed_s, steps=measured, samples=self.timer.measured_samples,
                units=self.timer.measured_units, reader_s=None, peak_mem_mib=peak_mem_mib,
                loss_first=self.loss_first, loss_last=self.loss_last,
                interference=run.interference(self.timer.cpu_start, self.timer.cpu_end, "cpu"),
                step_s=self.timer.measured_step_s, warmup_steps=self.timer.warmup_steps,
                warmup_settled=self.steady.was_settled)
