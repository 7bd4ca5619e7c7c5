"""The one line a finished run prints: its figure, built from the record it stored.

    fleetbench result: resnet50 tiny 1x2 mgwfbp | 48.31 images/s (24.16 per device) | step 331.2 ms | MFU 1.2% | peak 812 MiB | results/runs.jsonl id 3f9c2a1b
    fleetbench result: ctr tiny 2/2 async | 5741 examples/s (2870 per worker) | step 5.574 ms | peak 332 MiB | r.jsonl id 0c1d2e3f
    fleetbench result: comm full 2x1 all_reduce | busbw 0.1194 GB/s (mean of sizes >= 64 MiB) | algbw 0.1570 GB/s at 128 MiB | r.jsonl id 9a8b7c6d

Rank 0 of a run outside a supervisor prints it (train/run.py); `fleetbench launch` and each run of
a sweep print it from the record found in the store by the id the job's rank printed
(results.job_record). The head is NAME PRESET NODESxDEVICES METHOD (parameter-server runs:
SERVERS/WORKERS; comm runs: the op the figures are of). Every figure is the record's, rounded as
the report rounds one run (stability.format_pm: 4 significant digits); MFU and peak memory only
when the record has them; the record's id is its first 8 hex digits, as the report's run lists
show it (ids are uuid4 hex: two of ~77,000 runs share their first 8 digits with even odds).
"""
from __future__ import annotations

import dataclasses

from fleetbench.measure.repeats.stability import format_pm

PREFIX = "fleetbench result: "
ID_DIGITS = 8


@dataclasses.dataclass(frozen=True)
class CommFigures:
    """The comm benchmark's headline op: busbw averaged over sizes from `from_bytes`, and the algbw
    of its largest size."""

    op: str
    ops: int  # ops the run measured (the figures are of the first that moves data)
    busbw_GBps: float | None  # None: the op moves no data (barrier)
    from_bytes: int | None
    algbw_GBps: float | None
    at_bytes: int | None
    alpha_us: float | None


@dataclasses.dataclass(frozen=True)
class ResultFields:
    """What the line shows of one stored record."""

    benchmark: str
    preset: str | None
    mode: str
    method: str
    nodes: int
    devices_per_node: int
    servers: int | None  # parameter-server runs: servers (world_size counts the workers)
    workers: int
    throughput: float | None
    unit: str
    per_device: float | None
    step_time_ms: float | None
    mfu: float | None
    peak_mem_mib: float | None
    comm: CommFigures | None
    store: str
    record_id: str


def fields_of(record: dict, store: str) -> ResultFields:
    """The line's fields of a stored (schema-1, successful) record kept in `store`."""
    m = record["metrics"]
    runtime = (record.get("config") or {}).get("runtime") or {}
    return ResultFields(
        benchmark=record["benchmark"], preset=record.get("preset"), mode=record["mode"], method=str(record["method"]),
        nodes=record["nodes"], devices_per_node=record["devices_per_node"], servers=runtime.get("servers"),
        workers=record["world_size"], throughput=m.get("throughput"), unit=m.get("unit") or "",
        per_device=m.get("throughput_per_device"), step_time_ms=m.get("step_time_ms"), mfu=m.get("mfu"),
        peak_mem_mib=m.get("peak_mem_mib"), comm=_comm(m) if record["mode"] == "comm" else None, store=store,
        record_id=record["id"])


def _comm(m: dict) -> CommFigures:
    op = m.get("op") or ""
    rows = [r for r in m.get("rows") or () if r.get("op") == op]
    last = max(rows, key=lambda r: r["bytes"]) if rows else {}
    return CommFigures(op=op, ops=len(m.get("ops") or {}) or 1, busbw_GBps=m.get("busbw_GBps"),
                       from_bytes=m.get("headline_min_bytes"), algbw_GBps=last.get("algbw_GBps"),
                       at_bytes=last.get("bytes"), alpha_us=m.get("alpha_us"))


def line(f: ResultFields) -> str:
    """The summary line of one run (the module docstring shows its shapes)."""
    if f.comm is not None:
        parts = [_head(f, f.comm.op + (f" (first of {f.comm.ops} ops)" if f.comm.ops > 1 else "")), *_comm_parts(f.comm)]
    else:
        parts = [_head(f, f.method), _throughput(f)]
        parts += [f"step {format_pm(f.step_time_ms, None)} ms"] if f.step_time_ms else []
        parts += [f"MFU {f.mfu:.1%}"] if f.mfu is not None else []
        parts += [f"peak {f.peak_mem_mib:.0f} MiB"] if f.peak_mem_mib else []
    parts.append(f"{f.store} id {f.record_id[:ID_DIGITS]}")
    return PREFIX + " | ".join(parts)


def _head(f: ResultFields, what: str) -> str:
    shape = f"{f.servers}/{f.workers}" if f.mode == "ps" and f.servers else f"{f.nodes}x{f.devices_per_node}"
    return " ".join(x for x in (f.benchmark, f.preset, shape, what) if x)


def _throughput(f: ResultFields) -> str:
    if f.throughput is None:
        return "no throughput"
    text = f"{format_pm(f.throughput, None)} {f.unit}"
    if f.per_device is not None and f.workers > 1:
        text += f" ({format_pm(f.per_device, None)} per {'worker' if f.mode == 'ps' else 'device'})"
    return text


def _comm_parts(c: CommFigures) -> list[str]:
    if c.busbw_GBps is None:  # a barrier moves no data: its time is its figure
        return [f"latency {format_pm(c.alpha_us, None)} us"] if c.alpha_us is not None else ["no busbw"]
    parts = [f"busbw {format_pm(c.busbw_GBps, None)} GB/s"
             + (f" (mean of sizes >= {size_text(c.from_bytes)})" if c.from_bytes else "")]
    if c.algbw_GBps is not None:
        parts.append(f"algbw {format_pm(c.algbw_GBps, None)} GB/s at {size_text(c.at_bytes)}")
    return parts


def size_text(n: int) -> str:
    """Bytes in the largest binary unit that keeps them whole or short: 64 MiB, 4 KiB, 8 B."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"
