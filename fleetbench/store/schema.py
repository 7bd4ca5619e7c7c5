"""Schema 1 of a result record: its constants and what a valid record is (pure; no I/O).

docs/reference/records.md describes every field; store/results.py builds and stores records,
measure/repeats/aggregate.py groups them.
"""
from __future__ import annotations

import math

from fleetbench import cmdline

SCHEMA = 1
MODES = ("collective", "ps", "comm", "diagnose")
UNITS = ("images/s", "tokens/s", "samples/s", "sequences/s", "words/s", "examples/s", "GB/s")  # GB/s: comm busbw
# A record with `source` set was not measured here (e.g. a published table); see docs/guide/results.md.
SOURCE_KINDS = ("published",)

class RecordError(cmdline.UserError):
    """A record or results file that does not follow schema 1; the message is one line."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _problem(record) -> str | None:
    """What is wrong with `record`, or None. Checks in reading order; first problem wins."""
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    if record.get("schema") != SCHEMA:
        return f"schema: expected {SCHEMA}, got {record.get('schema')!r}"
    for key in ("id", "time", "benchmark", "method"):
        if not isinstance(record.get(key), str) or not record.get(key):
            return f"{key}: expected a non-empty string, got {record.get(key)!r}"
    if record.get("mode") not in MODES:
        return f"mode: expected one of {'|'.join(MODES)}, got {record.get('mode')!r}"
    if record.get("preset") is not None and not isinstance(record["preset"], str):
        return f"preset: expected a string or null, got {record['preset']!r}"
    if not isinstance(record.get("config"), dict):
        return f"config: expected an object, got {record.get('config')!r}"
    for key in ("nodes", "devices_per_node", "world_size"):
        if not _is_int(record.get(key)) or record[key] < 1:
            return f"{key}: expected an integer >= 1, got {record.get(key)!r}"
    network = record.get("network")
    if network is not None and not isinstance(network, dict):
        return f"network: expected an object or null, got {network!r}"
    launch = record.get("launch")
    if launch is not None and not (isinstance(launch, dict) and isinstance(launch.get("executor"), str)
                                   and isinstance(launch.get("hosts"), list)):
        return f"launch: expected null or an object with executor (a string) and hosts (a list), got {launch!r}"
    error = record.get("error")
    if error is not None and (not isinstance(error, str) or not error):
        return f"error: expected null or a non-empty message, got {error!r}"
    if record["mode"] == "diagnose":  # figures with units in their names, no one throughput (docs/guide/diagnose.md)
        metrics_problem = None if isinstance(record.get("metrics"), dict) else "metrics: expected an object"
    else:
        metrics_problem = _metrics_problem(record.get("metrics"), failed=error is not None)
    problem = metrics_problem or _origin_problem(record.get("source"), record.get("env"))
    if problem:
        return problem
    if record.get("topology") is not None and not isinstance(record["topology"], dict):
        return f"topology: expected an object or null, got {record['topology']!r}"
    if record.get("git") is not None and not isinstance(record["git"], str):
        return f"git: expected a commit sha or null, got {record['git']!r}"
    return None


def _origin_problem(source, env) -> str | None:
    """A published record names its source and may lack env; one measured here carries env."""
    if source is not None:
        if not isinstance(source, dict) or source.get("kind") not in SOURCE_KINDS:
            return f"source: expected null or an object with kind in {'|'.join(SOURCE_KINDS)}"
        for key in ("name", "citation"):
            if not isinstance(source.get(key), str) or not source[key]:
                return f"source.{key}: expected a non-empty string (short name; where it was published)"
    if source is None and not isinstance(env, dict):
        return "env: expected an object (every result measured here carries its environment)"
    if source is not None and env is not None and not isinstance(env, dict):
        return f"env: expected an object or null, got {env!r}"
    return None


def _metrics_problem(metrics, failed: bool) -> str | None:
    if metrics is None:
        return None if failed else "metrics: missing (only a failed run, with error set, may omit it)"
    if not isinstance(metrics, dict):
        return f"metrics: expected an object, got {metrics!r}"
    if failed and "throughput" not in metrics:
        return None  # partial metrics of a failed run
    throughput = metrics.get("throughput")
    if not _is_number(throughput):
        return f"metrics.throughput: expected a finite number, got {throughput!r}"
    if throughput < 0:
        return f"metrics.throughput: expected >= 0, got {throughput!r}"
    if "unit" not in metrics:
        return f"metrics.unit: missing (expected one of {', '.join(UNITS)})"
    if metrics["unit"] not in UNITS:
        return f"metrics.unit: expected one of {', '.join(UNITS)}, got {metrics['unit']!r}"
    std = metrics.get("throughput_std")
    if std is not None and (not _is_number(std) or std < 0):
        return f"metrics.throughput_std: expected a number >= 0 or null, got {std!r}"
    repeats = metrics.get("repeats")
    if repeats is not None and (not _is_int(repeats) or repeats < 1):
        return f"metrics.repeats: expected an integer >= 1 or null, got {repeats!r}"
    return _timing_problem(metrics)


# the machine-speed probe's figures (metrics.PROBE_KEYS; named here too: schema imports only cmdline)
PROBE_FIGURES = ("probe_gemm_gflops_before", "probe_gemm_gflops_after", "probe_triad_gbps_before",
                 "probe_triad_gbps_after", "probe_scalar_mops_before", "probe_scalar_mops_after")


def _timing_problem(metrics: dict) -> str | None:
    """The speed probe's figures (> 0 or null), its definition (an object or null) and the step
    times (by rank, each a list of milliseconds >= 0), where a record has them."""
    for key in PROBE_FIGURES:
        value = metrics.get(key)
        if value is not None and (not _is_number(value) or value <= 0):
            return f"metrics.{key}: expected a number > 0 or null, got {value!r}"
    if metrics.get("probe") is not None and not isinstance(metrics["probe"], dict):
        return f"metrics.probe: expected an object (the probe's workload) or null, got {metrics['probe']!r}"
    times = metrics.get("step_times_ms")
    if times is not None and not (isinstance(times, list) and all(
            isinstance(row, list) and all(_is_number(t) and t >= 0 for t in row) for row in times)):
        return "metrics.step_times_ms: expected a list (by rank) of lists of milliseconds >= 0, or null"
    return None


def validate(record, where: str = "") -> None:
    """Raise RecordError("<where>: <field>: <what was expected>") if `record` breaks schema 1."""
    problem = _problem(record)
    if problem:
        raise RecordError(f"{where or 'record'}: {problem}")
