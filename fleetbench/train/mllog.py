"""MLPerf-style `:::MLLOG` lines of a convergence run, written by MLCommons' own logger
(`mlperf-logging`, PyPI) so that MLCommons' parser and checkers read them (docs/guide/convergence.md).

Rank 0 writes them to its stdout (the rank's log) beside fleetbench's own lines; other ranks
write nothing. The keys are MLPerf Training's: init_start/init_stop and run_start (stamped with
the times the loop took: fleetbench/train/loop.py), the run's settings (seed, global_batch_size,
opt_base_learning_rate, train_samples, eval_samples, epoch_count), per epoch
epoch_start/epoch_stop, eval_start/eval_stop and eval_accuracy (metadata epoch_num), and run_stop
with metadata status `success` (the target was reached) or `aborted` (it was not, or no target).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
import sys

from mlperf_logging.mllog import constants
from mlperf_logging.mllog.mllog import MLLogger

SUCCESS, ABORTED = constants.SUCCESS, constants.ABORTED


class RunLog:
    """The :::MLLOG writer of one rank (a no-op unless `enabled`)."""

    def __init__(self, enabled: bool, benchmark: str) -> None:
        self._log = None
        if enabled:
            out = logging.getLogger("fleetbench.mllog")
            out.propagate = False  # the root logger (Paddle's handlers) must not print the line twice
            out.setLevel(logging.INFO)
            if not out.handlers:
                out.addHandler(logging.StreamHandler(sys.stdout))
            # stack offset 2: the metadata's file/lineno name the loop's line, not this wrapper's
            self._log = MLLogger(logger=out, default_stack_offset=2)
        self.benchmark = benchmark

    def event(self, key: str, value: object = None, time_ms: float | None = None, **metadata: object) -> None:
        if self._log is not None:
            self._log.event(key=key, value=value, metadata=metadata or None, time_ms=time_ms)

    def start(self, key: str, value: object = None, time_ms: float | None = None, **metadata: object) -> None:
        if self._log is not None:
            self._log.start(key=key, value=value, metadata=metadata or None, time_ms=time_ms)

    def end(self, key: str, value: object = None, time_ms: float | None = None, **metadata: object) -> None:
        if self._log is not None:
            self._log.end(key=key, value=value, metadata=metadata or None, time_ms=time_ms)

    def opening(self, init_start_ms: float, run_start_ms: float, settings: dict) -> None:
        """The lines up to run_start, stamped when those moments happened (they are written
        once training begins, when the settings are known)."""
        self.start(constants.INIT_START, time_ms=init_start_ms)
        self.event(constants.SUBMISSION_BENCHMARK, self.benchmark, time_ms=init_start_ms)
        for key, value in settings.items():
            self.event(key, value, time_ms=run_start_ms)
        self.end(constants.INIT_STOP, time_ms=run_start_ms)
        self.start(constants.RUN_START, time_ms=run_start_ms)

    def stop(self, reached: bool) -> None:
        self.end(constants.RUN_STOP, status=SUCCESS if reached else ABORTED)


def parse(lines: Iterable[str]) -> list[dict]:
    """The :::MLLOG lines among `lines` (any text lines), read back by MLCommons' parser: one dict
    {key, value, metadata, time_ms} per line, in order. ValueError names the first line it refused."""
    from mlperf_logging.compliance_checker.mlp_parser import ruleset_610 as parser

    parsed, failed = parser.parse_generator(lines)
    if failed:
        line, why = failed[0]
        raise ValueError(f"a :::MLLOG line MLCommons' parser refused ({why}): {line[:200]}")
    return [{"key": p.key, "value": p.value["value"], "metadata": p.value["metadata"], "time_ms": p.timestamp}
            for p in parsed]
