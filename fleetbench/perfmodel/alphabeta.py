"""The alpha-beta model of ring all-reduce, fitted on comm records.

One all-reduce of S bytes over a ring of n ranks sends 2(n-1) messages of S/n bytes from every
rank (reduce-scatter, then all-gather), so with a per-message latency a and a link bandwidth B:

    time(S) = 2(n-1)*a + 2(n-1)/n * S / B

The comm benchmark fits `time = alpha + factor * S / B` (factor = 2(n-1)/n for all_reduce, the
nccl-tests bus-bandwidth factor), so its alpha is the per-call constant 2(n-1)*a for its n, and its
B is the bus bandwidth. A training step issues its gradients as a sequence of `calls` all-reduces
(buckets) of S bytes in all, one after another:

    step_comm(S, calls) = calls * 2(n-1)*a + 2(n-1)/n * S / B

Small calls are priced by measurement, not by the fit: alpha is an intercept over sizes up to tens
of MB, and a step of a few small collectives (CTR: four calls of under 100 kB a step) pays what
the comm rows at its sizes took, which here is up to twice alpha. So a Link keeps the median time of
the rows at or below SMALL_MAX bytes, per size over the repeated comm runs, and a call of those
sizes costs that median, interpolated in log-size (below the smallest size measured: its time,
latency being flat there). Larger calls keep the fit.

When nodes hold several devices, gloo's all-reduce is taken as hierarchical: an all-reduce among
the d devices of a node (intra-node fit) plus one among the N nodes (inter-node fit), each of S
bytes. NCCL's (GPU work) is perfmodel/nccl.py: rings over all GPUs, or trees, whichever is cheaper.
Units: bytes, microseconds inside, milliseconds out; GB/s = 10^9 bytes/s as nccl-tests.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
import statistics

from fleetbench import cmdline

ALLREDUCE = "all_reduce"
# Rows at or below this size are latency-dominated on every link here (at 10gbe 256 KiB is 0.2 ms
# on the wire against 0.3-2.2 ms measured a call): they are priced as measured (module doc).
SMALL_MAX = 256 * 1024


class FitError(cmdline.UserError):
    """A comm record whose rows cannot give a latency-bandwidth fit; one line."""


def allreduce_factor(ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor of all_reduce: the share of S each rank's link carries."""
    return 2 * (ranks - 1) / ranks


@dataclasses.dataclass(frozen=True)
class Link:
    """All-reduce cost among `ranks` ranks: every call costs alpha_us, plus the bytes at
    bandwidth_GBps (bus bandwidth). `source` says where the numbers came from."""
    alpha_us: float
    bandwidth_GBps: float
    ranks: int
    source: str
    small: tuple = ()  # ((bytes, median time_us), ...) ascending, measured at these ranks (module doc)
    latency_known: bool = True  # False: no comm record measured the latency (defaults apply, nccl.py)

    @property
    def hop_alpha_us(self) -> float:
        """The latency of one of the 2(n-1) ring messages (alpha of the textbook model)."""
        return self.alpha_us / (2 * (self.ranks - 1)) if self.ranks > 1 else 0.0

    def at(self, ranks: int) -> "Link":
        """The same link for another ring size: same per-message latency, same bandwidth."""
        if ranks == self.ranks:
            return self
        return Link(self.hop_alpha_us * 2 * (ranks - 1), self.bandwidth_GBps, ranks,
                    f"{self.source}, extrapolated from {self.ranks} to {ranks} ranks",
                    latency_known=self.latency_known)

    def with_hop_us(self, hop_us: float, note: str) -> "Link":
        """The same link with a per-message latency nobody measured (nccl.DEFAULT_HOP_US)."""
        return dataclasses.replace(self, alpha_us=hop_us * 2 * (self.ranks - 1),
                                   source=f"{self.source}; {note}")

    def allreduce_ms(self, nbytes: float, calls: float) -> float:
        if self.ranks <= 1 or nbytes <= 0:
            return 0.0
        measured = self.measured_call_us(nbytes / calls) if calls else None
        if measured is not None:
            return calls * measured / 1e3
        wire_us = allreduce_factor(self.ranks) * nbytes / (self.bandwidth_GBps * 1e3)
        return (calls * self.alpha_us + wire_us) / 1e3

    def measured_call_us(self, nbytes: float) -> float | None:
        """The measured time of one all-reduce of `nbytes` (module doc), or None beyond the table."""
        if not self.small or nbytes > self.small[-1][0]:
            return None
        sizes = [b for b, _ in self.small]
        i = bisect.bisect_left(sizes, nbytes)
        if i == 0:
            return self.small[0][1]
        (b0, t0), (b1, t1) = self.small[i - 1], self.small[i]
        w = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
        return t0 + w * (t1 - t0)

    def describe(self) -> str:
        small = (f"; calls up to {self.small[-1][0] // 1024} KiB as measured, {self.small[0][1]:.0f}-"
                 f"{max(t for _, t in self.small):.0f} us" if self.small else "")
        return (f"alpha {self.alpha_us:.1f} us/call, {self.bandwidth_GBps:.4g} GB/s bus, "
                f"{self.ranks} ranks{small} ({self.source})")


@dataclasses.dataclass(frozen=True)
class Hierarchical:
    """Nodes of several devices: an intra-node all-reduce plus an inter-node one, S bytes each."""
    intra: Link
    inter: Link

    @property
    def source(self) -> str:
        return f"hierarchical: intra-node {self.intra.describe()}; inter-node {self.inter.describe()}"

    def allreduce_ms(self, nbytes: float, calls: float) -> float:
        return self.intra.allreduce_ms(nbytes, calls) + self.inter.allreduce_ms(nbytes, calls)

    def describe(self) -> str:
        return self.source


def fit_rows(rows: list[dict], ranks: int) -> tuple[float, float]:
    """(alpha_us, bandwidth_GBps) of all_reduce rows of a comm record, by the comm benchmark's own
    fit (measure.comm.fit_alpha_beta: least squares on relative errors); rows of other ops or
    with a wrong result are left out."""
    from fleetbench.comm.opmath import (
        fit_alpha_beta,  # numpy only; one fit for both tools
    )

    if ranks < 2:
        raise FitError(f"a fit needs at least 2 ranks (got {ranks})")
    factor = allreduce_factor(ranks)
    points = [(factor * float(r["bytes"]), float(r["time_us"]) / 1e6) for r in rows
              if r.get("op", ALLREDUCE) == ALLREDUCE and not r.get("wrong") and r["time_us"] > 0]
    fit = fit_alpha_beta(points)
    if fit["bandwidth_GBps"] is None or len({x for x, _ in points}) < 2:
        raise FitError(f"{len(points)} all_reduce rows do not determine a bandwidth "
                       "(needs 2 sizes or more, time growing with size)")
    return max(fit["alpha_us"], 0.0), fit["bandwidth_GBps"]


def small_calls(rows: list[dict]) -> tuple:
    """((bytes, median time_us), ...) of the all_reduce rows at or below SMALL_MAX bytes, pooled
    over repeated runs (the rows of all of them)."""
    times: dict[int, list[float]] = {}
    for r in rows:
        if r.get("op", ALLREDUCE) == ALLREDUCE and not r.get("wrong") and 0 < r["bytes"] <= SMALL_MAX:
            times.setdefault(int(r["bytes"]), []).append(float(r["time_us"]))
    return tuple((b, statistics.median(t)) for b, t in sorted(times.items()))


def pooled_link(fits: list[tuple[float, float]], ranks: int, source: str, rows: list[dict] = ()) -> Link:
    """One Link from the fits of repeated comm runs (mean latency, mean time per byte) and their
    small rows (`small_calls`)."""
    alpha = statistics.fmean(a for a, _ in fits)
    per_byte = statistics.fmean(1.0 / b for _, b in fits)
    return Link(alpha, 1.0 / per_byte, ranks, source, small_calls(list(rows)))


def rate_link(rate_gbit: float, ranks: int, hop_alpha_us: float | None, source: str) -> Link:
    """A link known only by its rate (Gbit/s): bus bandwidth = rate / 8 GB/s, the per-message
    latency borrowed from a measured fit (None: not known, 0 until a default is put in)."""
    return Link((hop_alpha_us or 0.0) * 2 * (ranks - 1), rate_gbit / 8.0, ranks, source,
                latency_known=hop_alpha_us is not None)
