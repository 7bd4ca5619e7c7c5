"""What limited a comm run's bus bandwidth: the link, the CPU's reduction, or latency (pure).

Each is a ceiling on busbw, in GB/s:
- link: the raw TCP rate measured through the link (metrics.link_tcp_GBps), else the emulated
  network's shaped rate (network.rate_gbit / 8); none on one node with no shaped network;
- CPU reduction (a CPU backend, gloo, only: NCCL reduces on the GPU): the machine-speed probe's
  triad (memory bandwidth of one core, the mean of the run's two edges) x the core share a rank
  gets (cores / ranks on the machine, at most 1) / the bytes of memory the op reads and writes per
  bus byte (opmath.cpu_bytes_per_bus_byte);
- latency: the bus bytes of one op at the headline's smallest size / the alpha-beta fit's alpha
  (the busbw if moving the bytes cost nothing); none when the fit found no bandwidth or an alpha
  above that op's own time.

A busbw at or above LINK_SHARE of the link is limited by the link. Below it, the lowest of the
other ceilings names the limit when busbw reaches EXPLAINS of it. Failing those, a machine whose
CPU time was at least CPU_BUSY_PCT busy while the ops ran (this job and other processes together,
measure/interference.py) was limited by its busy CPU ("cpu_busy": the cores, not the reduction's
arithmetic, ran out); otherwise nothing measured explains the run ("unexplained"), and every
ceiling is given.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from fleetbench.comm import opmath

LINK_SHARE = 0.7  # busbw at or above this share of the link: the link is the limit
# A model's ceiling is a best case (no overlap lost, no protocol cost): a busbw within a factor 2
# of it is explained by it; further below, something the three ceilings do not count limits.
EXPLAINS = 0.5
# The machine's CPU time busy in the ops at or above this %: no core was left to go faster.
CPU_BUSY_PCT = 90.0
NAMES = ("link", "cpu_reduction", "latency", "cpu_busy", "unexplained")


@dataclasses.dataclass(frozen=True)
class Figures:
    """What a comm run measured of one op, as the limit needs it (None: not measured)."""

    op: str
    ranks: int
    busbw_GBps: float
    at_bytes: int  # the headline's smallest size (nccl-tests' bytes)
    alpha_us: Optional[float]  # the alpha-beta fit's (None: the fit determined no latency)
    link_GBps: Optional[float]
    link_source: str  # "raw TCP" or the shaped network's profile
    triad_GBps: Optional[float]  # None: no probe, or not a CPU backend
    core_share: float = 1.0  # cores / ranks on the machine, at most 1
    job_cpu_pct: Optional[float] = None  # % of the machine's CPU time in the ops: this job's
    others_cpu_pct: Optional[float] = None  # and other processes' (interference_cpu_pct)

    @property
    def busy_pct(self) -> Optional[float]:
        if self.job_cpu_pct is None or self.others_cpu_pct is None:
            return None
        return self.job_cpu_pct + self.others_cpu_pct


@dataclasses.dataclass(frozen=True)
class Limit:
    """The named limit, its ceiling's share reached, every ceiling (GB/s) and one line saying so."""

    limit: str  # one of NAMES
    busbw_GBps: float
    share: Optional[float]  # busbw / the named ceiling (the lowest one for cpu_busy and unexplained)
    ceilings: dict  # link, cpu_reduction, latency -> GB/s or None
    text: str
    busy_pct: Optional[float] = None  # the machine's CPU time busy in the ops, % (None: not measured)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _gb(value: float) -> str:
    return f"{value:.3g} GB/s"


def _us(value: float) -> str:
    return f"{value:.3g} us" if value < 1000 else f"{value / 1000:.3g} ms"


def _pct(share: float) -> str:
    return f"{share:.0%}" if share >= 0.01 else f"{share:.1%}"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def ceilings(f: Figures) -> dict:
    """Each ceiling on busbw in GB/s (None where its figures are missing)."""
    cpu_bytes = opmath.cpu_bytes_per_bus_byte(f.op)
    cpu = None if not f.triad_GBps else f.triad_GBps * f.core_share / cpu_bytes
    bus_bytes = f.at_bytes * opmath.busbw_factor(f.op, f.ranks)
    took_s = bus_bytes / (f.busbw_GBps * 1e9) if f.busbw_GBps > 0 else float("inf")
    # an alpha above the op's own time is no latency: the fit was misled by other sizes' noise
    usable = f.alpha_us and bus_bytes > 0 and f.alpha_us * 1e-6 <= took_s
    latency = bus_bytes / (f.alpha_us * 1e-6) / 1e9 if usable else None
    return {"link": f.link_GBps or None, "cpu_reduction": cpu, "latency": latency}


def _why(f: Figures, name: str, ceiling: dict) -> str:
    """How the figures give one ceiling, in words."""
    if name == "link":
        return f"the link ({f.link_source}) {_gb(ceiling['link'])}"
    if name == "cpu_reduction":
        share = "" if f.core_share >= 1 else f" x {f.core_share:.2g} of a core"
        return (f"the triad {_gb(f.triad_GBps)}{share} over {opmath.cpu_bytes_per_bus_byte(f.op):g} bytes "
                f"of memory a bus byte allows ~{_gb(ceiling['cpu_reduction'])}")
    bus_bytes = f.at_bytes * opmath.busbw_factor(f.op, f.ranks)
    took_us = bus_bytes / f.busbw_GBps / 1e3 if f.busbw_GBps > 0 else float("inf")
    return (f"alpha {_us(f.alpha_us)} is {_pct(f.alpha_us / took_us)} of the {_size(f.at_bytes)} op's "
            f"{_us(took_us)}, allowing ~{_gb(ceiling['latency'])}")


def judge(f: Figures) -> Limit:
    """The limit of one run's op (see the module's rule)."""
    ceiling = ceilings(f)
    link = ceiling["link"]
    against = f"{_gb(f.busbw_GBps)} busbw" + (f" against {_gb(link)} link ({f.link_source})" if link else "")
    if link and f.busbw_GBps >= LINK_SHARE * link:
        return Limit("link", f.busbw_GBps, f.busbw_GBps / link, ceiling,
                     f"limited by the link: {_gb(f.busbw_GBps)} busbw, {_pct(f.busbw_GBps / link)} of "
                     f"{_gb(link)} ({f.link_source})", f.busy_pct)
    others = {name: value for name, value in ceiling.items() if name != "link" and value}
    lowest = min(others, key=others.get) if others else None
    if lowest and f.busbw_GBps >= EXPLAINS * others[lowest]:
        label = "the CPU's reduction" if lowest == "cpu_reduction" else "latency"
        return Limit(lowest, f.busbw_GBps, f.busbw_GBps / others[lowest], ceiling,
                     f"limited by {label}: {against}; {_why(f, lowest, ceiling)}", f.busy_pct)
    known = [name for name in ("link", "cpu_reduction", "latency") if ceiling[name]]
    floor = min((ceiling[name] for name in known), default=None)
    busy = f.busy_pct
    if busy is not None and busy >= CPU_BUSY_PCT:
        parts = [f"limited by the CPU, busy: {busy:.0f}% of the machine's CPU time while the ops ran "
                 f"(this job {f.job_cpu_pct:.0f}%, other processes {f.others_cpu_pct:.0f}%); {against}"]
        parts += [_why(f, name, ceiling) for name in known if name != "link"]
        return Limit("cpu_busy", f.busbw_GBps, f.busbw_GBps / floor if floor else None, ceiling,
                     "; ".join(parts), busy)
    parts = [f"not explained by link, CPU reduction or latency: {against}"]
    if busy is not None:
        parts.append(f"the machine's CPU {busy:.0f}% busy (other processes {f.others_cpu_pct:.0f}%)")
    parts += [_why(f, name, ceiling) for name in known if name != "link"]
    parts += [f"{name}: no figure" for name in ("cpu_reduction", "latency") if not ceiling[name]]
    return Limit("unexplained", f.busbw_GBps, f.busbw_GBps / floor if floor else None, ceiling,
                 "; ".join(parts), busy)


def triad(metrics: dict) -> Optional[float]:
    """The probe's triad over the run: the mean of the edges measured (the slowest rank's each)."""
    edges = [metrics.get(f"probe_triad_gbps_{edge}") for edge in ("before", "after")]
    edges = [v for v in edges if v]
    return sum(edges) / len(edges) if edges else None


def figures(metrics: dict, op: str, ranks: int, network: Optional[dict], cpu_backend: bool,
            core_share: float) -> Optional[Figures]:
    """The Figures of `op` in a comm run's metrics (None for an op that moves no payload).
    `network`: the record's (or the contract's), `cpu_backend`: the op reduced on the CPU (gloo)."""
    summary = (metrics.get("ops") or {}).get(op) or metrics
    rows = [r for r in metrics.get("rows") or [] if r["op"] == op and r["bytes"] > 0]
    if op == "barrier" or not rows or not summary.get("busbw_GBps"):
        return None
    threshold = summary.get("headline_min_bytes") or 0
    at_bytes = min((r["bytes"] for r in rows if r["bytes"] >= threshold), default=max(r["bytes"] for r in rows))
    tcp, rate = metrics.get("link_tcp_GBps"), (network or {}).get("rate_gbit")
    source = "raw TCP" if tcp else f"shaped {(network or {}).get('profile') or ''}".strip()
    # without a fitted bandwidth the fit's alpha is the sizes' mean time, not a latency
    alpha = summary.get("alpha_us") if summary.get("bandwidth_GBps") else None
    return Figures(op, ranks, summary["busbw_GBps"], at_bytes, alpha,
                   tcp or (rate / 8 if rate else None), source,
                   triad(metrics) if cpu_backend else None, min(1.0, core_share),
                   metrics.get("job_cpu_pct"), metrics.get("interference_cpu_pct"))


def of_record(record: dict, op: Optional[str] = None) -> Optional[Figures]:
    """The Figures of a stored comm record's `op` (its headline op by default). The ranks on the
    record's machine: every rank on an emulated cluster (one machine), else one node's."""
    metrics, network = record.get("metrics") or {}, record.get("network") or {}
    runtime = (record.get("config") or {}).get("runtime") or {}
    cores = ((record.get("env") or {}).get("cpu") or {}).get("usable_threads")
    here = record["world_size"] if network.get("emulated") else record.get("devices_per_node") or 1
    return figures(metrics, op or metrics.get("op"), record["world_size"], network,
                   runtime.get("backend") == "gloo", cores / here if cores else 1.0)
