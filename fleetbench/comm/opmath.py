"""The communication benchmark's arithmetic, in nccl-tests' terms (pure: numpy, no paddle).

Per op and message size: algbw = bytes / time; busbw = algbw x the op's factor, the share of the
message each rank's link must carry for that op, so busbw compares ops with one another and with
the link rate; GB/s = 1e9 bytes/s. `bytes` is nccl-tests' size: the whole buffer for all_reduce,
broadcast, reduce and sendrecv; the gathered (output) buffer for all_gather; the input buffer for
reduce_scatter; one rank's send buffer for alltoall.

Also here: the latency-bandwidth fit (time = alpha + bytes x factor / bandwidth), the console
table, and the correctness check (the values each rank sends and what it must receive).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np

ROOT = 0  # broadcast's source and reduce's destination, as nccl-tests' default root
REDOPS = ("sum", "max")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# Allowed |error| relative to the expected value: the fill makes every expected value a small
# integer, exact in each type up to 2^mantissa, so this only absorbs rounding of large sums.
TOLERANCE = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}
PATTERN = 7  # the fill repeats every 7 elements; ranks r and r+7 send the same pattern
CORRUPT_VALUE = 100.0  # what debug.corrupt_rank writes into its input's last element


class CommError(ValueError):
    """A bad op list or size range; str(err) is one line naming the config key."""


# ---------------------------------------------------------------- the ops, one entry each
def _ring(ranks: int) -> float:
    return 2 * (ranks - 1) / ranks


def _chunk(ranks: int) -> float:
    return (ranks - 1) / ranks


@dataclasses.dataclass(frozen=True)
class Op:
    """Everything about one collective, as one nccl-tests struct: its bus factor, its buffers, what
    it must deliver (in `expected`), the Paddle call and the backends that lack it.

    `call(dist, c)` runs the op once on `c` (collectives.Collective: send/recv buffers, reduce_op,
    peers) with `dist` = paddle.distributed, passed in so that this module stays free of Paddle.
    """

    name: str
    bus_factor: Callable[[int], float]  # ranks -> share of the message each rank's link carries
    call: Callable[[Any, Any], None]
    reduces: bool = False  # applies redop
    chunked: bool = False  # the buffer is split in per-rank chunks: count is a multiple of the ranks
    rooted: bool = False  # has a root rank (ROOT)
    # elements of a separate output buffer from (count, ranks); None: the op works in place
    output_count: Optional[Callable[[int, int], int]] = None
    gloo_missing: Optional[str] = None  # why Paddle's gloo process group cannot run it
    reduced_share: float = 0.0  # of the bytes on a rank's link, the share it also reduces (cpu_bytes_per_bus_byte)


def _sendrecv(dist, c) -> None:
    """Ring shift: every rank sends to rank+1 and receives from rank-1 (nccl-tests' sendrecv).

    NCCL: one grouped isend+irecv, both directions at once. gloo: Paddle 2.6.2 runs a gloo send
    or recv to completion in the calling thread, and matches them by a per-group counter of
    calls, so each neighbour pair gets its own group and even ranks send first while odd ranks
    receive first (no rank waits for one that waits for it); a rank's send and receive run one
    after the other, so gloo's sendrecv cannot overlap the two directions (about half the link).
    """
    rank, ranks = c.peers.rank, c.peers.ranks
    nxt, prev = (rank + 1) % ranks, (rank - 1) % ranks
    if c.peers.backend == "nccl":
        tasks = dist.batch_isend_irecv([dist.P2POp(dist.isend, c.send, nxt), dist.P2POp(dist.irecv, c.recv, prev)])
        for task in tasks:
            task.wait()
        return
    send = lambda: dist.send(c.send, dst=nxt, group=c.peers.ring[rank])  # noqa: E731
    recv = lambda: dist.recv(c.recv, src=prev, group=c.peers.ring[prev])  # noqa: E731
    for step in ((send, recv) if rank % 2 == 0 else (recv, send)):
        step()


_SAME = lambda count, ranks: count  # noqa: E731  (an output as large as the whole buffer)
TABLE = {op.name: op for op in (
    # a ring's reduce-scatter half is reduced, its all-gather half only copied
    Op("all_reduce", _ring, lambda dist, c: dist.all_reduce(c.send, op=c.reduce_op), reduces=True,
       reduced_share=0.5),
    # the gathered output is the whole buffer; the input one chunk of count / ranks
    Op("all_gather", _chunk, lambda dist, c: dist.stream.all_gather(c.recv, c.send), chunked=True,
       output_count=_SAME),
    Op("reduce_scatter", _chunk, lambda dist, c: dist.stream.reduce_scatter(c.recv, c.send, op=c.reduce_op),
       reduces=True, chunked=True, output_count=lambda count, ranks: count // ranks,
       gloo_missing="ProcessGroupGloo raises Unimplemented for reduce_scatter", reduced_share=1.0),
    Op("broadcast", lambda ranks: 1.0, lambda dist, c: dist.broadcast(c.send, src=ROOT), rooted=True),
    Op("reduce", lambda ranks: 1.0, lambda dist, c: dist.reduce(c.send, dst=ROOT, op=c.reduce_op),
       reduces=True, rooted=True, reduced_share=1.0),
    # dist.stream.alltoall_single takes (out, in) in 2.6 and 3.x alike; dist.alltoall_single's
    # order changed between them (2.6: in, out; 3.x: out, in)
    Op("alltoall", _chunk, lambda dist, c: dist.stream.alltoall_single(c.recv, c.send), chunked=True,
       output_count=_SAME, gloo_missing="ProcessGroupGloo raises Unimplemented for all_to_all"),
    Op("sendrecv", lambda ranks: 1.0, _sendrecv, output_count=_SAME),
    Op("barrier", lambda ranks: 0.0, lambda dist, c: dist.barrier()),  # moves no payload
)}
OPS = tuple(TABLE)
REDUCING = tuple(name for name, op in TABLE.items() if op.reduces)
CHUNKED = tuple(name for name, op in TABLE.items() if op.chunked)


def op_entry(op: str) -> Op:
    if op not in TABLE:
        raise CommError(f"config key 'op': unknown op {op!r} (known: {', '.join(OPS)})")
    return TABLE[op]


# ---------------------------------------------------------------- definitions
def busbw_factor(op: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor of `op` on `ranks` ranks (barrier moves no payload: 0)."""
    return op_entry(op).bus_factor(ranks)


# Memory bytes a CPU backend (gloo) reads and writes per bus byte: the send's copy into the kernel
# and the receive's copy out of it (a read and a write each), and, for the share it reduces, the
# reduction's two reads and one write (dst = dst + received).
COPY_BYTES = 4.0
REDUCE_BYTES = 3.0


def cpu_bytes_per_bus_byte(op: str) -> float:
    """Bytes of memory a CPU reads and writes per byte on a rank's link (busbw's byte) for `op`."""
    return COPY_BYTES + op_entry(op).reduced_share * REDUCE_BYTES


def bandwidths(nbytes: int, time_s: float, factor: float) -> tuple:
    """(algbw, busbw) in GB/s for `nbytes` moved in `time_s`."""
    algbw = nbytes / time_s / 1e9 if time_s > 0 else 0.0
    return algbw, algbw * factor


def parse_ops(text: str) -> list:
    """'all_reduce,all_gather' -> ['all_reduce', 'all_gather'] (order kept, duplicates refused)."""
    ops = [part.strip() for part in str(text).split(",") if part.strip()]
    unknown = [op for op in ops if op not in OPS]
    if not ops or unknown:
        raise CommError(f"config key 'op' expects one or more of {', '.join(OPS)}, comma-separated "
                        f"(got {text!r})")
    if len(set(ops)) != len(ops):
        raise CommError(f"config key 'op' lists an op twice (got {text!r})")
    return ops


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list:
    """Message sizes min_bytes, min_bytes*factor, ... up to max_bytes (nccl-tests' -b -e -f)."""
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def element_count(op: str, nbytes: int, ranks: int, dtype: str) -> int:
    """Elements of the size's buffer; rounded down to a multiple of the ranks where the buffer
    is split in per-rank chunks (a size too small for one element per chunk gives 0: skipped)."""
    if op == "barrier":
        return 0
    count = nbytes // DTYPE_BYTES[dtype]
    return count - count % ranks if op_entry(op).chunked else count


def plan(ops: list, size_list: list, ranks: int, dtype: str) -> list:
    """(op, bytes, count) of every measurement: each op over the sizes, barrier once (bytes 0)."""
    out = []
    for op in ops:
        if op == "barrier":
            out.append((op, 0, 0))
            continue
        counts = sorted({element_count(op, size, ranks, dtype) for size in size_list} - {0})
        out += [(op, count * DTYPE_BYTES[dtype], count) for count in counts]
    return out


# ---------------------------------------------------------------- rows, headline, fit
def row(op: str, nbytes: int, count: int, time_s: float, ranks: int, wrong: int) -> dict:
    """One measured size, as stored in metrics.rows."""
    algbw, busbw = bandwidths(nbytes, time_s, busbw_factor(op, ranks))
    return {"op": op, "bytes": nbytes, "count": count, "time_us": time_s * 1e6,
            "algbw_GBps": algbw, "busbw_GBps": busbw, "wrong": int(wrong)}


def headline_busbw(rows: list, min_bytes: int) -> tuple:
    """(mean busbw, threshold used) over the rows of sizes >= min_bytes; when every size is
    smaller, over the largest size alone. Rows of one op."""
    sized = [r for r in rows if r["bytes"] > 0]
    if not sized:
        return 0.0, 0
    threshold = min(min_bytes, max(r["bytes"] for r in sized))
    chosen = [r["busbw_GBps"] for r in sized if r["bytes"] >= threshold]
    return sum(chosen) / len(chosen), threshold


def fit_alpha_beta(points: list) -> dict:
    """Fit time = alpha + bus_bytes / bandwidth to (bus_bytes, time_s) points by least squares
    on relative errors (weights 1/time^2): sizes span many decades, and plain least squares
    would let the largest sizes decide alone, leaving alpha meaningless.

    alpha is kept >= 0 (refit through the origin when the free fit goes below). Returns alpha_us,
    bandwidth_GBps (None when the points cannot determine it: one distinct size, or a slope <= 0)
    and fit_max_rel_error (worst |fit - time| / time over the points).
    """
    if not points:
        return {"alpha_us": None, "bandwidth_GBps": None, "fit_max_rel_error": None}
    w = [1 / t ** 2 for _, t in points]
    sw = sum(w)
    sx = sum(wi * x for wi, (x, _) in zip(w, points))
    st = sum(wi * t for wi, (_, t) in zip(w, points))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, points))
    sxt = sum(wi * x * t for wi, (x, t) in zip(w, points))
    det = sw * sxx - sx * sx
    if det <= 1e-12 * sw * sxx:  # one distinct x: only a constant time can be fitted
        alpha, beta = st / sw, 0.0
    else:
        alpha = (sxx * st - sx * sxt) / det
        beta = (sw * sxt - sx * st) / det
        if alpha < 0:  # latency hidden in the noise of large messages: a negative one is no fit
            alpha, beta = 0.0, sxt / sxx
    worst = max(abs(alpha + beta * x - t) / t for x, t in points)
    return {"alpha_us": alpha * 1e6, "bandwidth_GBps": 1 / beta / 1e9 if beta > 0 else None,
            "fit_max_rel_error": worst}


def summarize_op(op: str, rows: list, ranks: int, headline_min_bytes: int) -> dict:
    """Headline busbw and the alpha-beta fit of one op's rows."""
    busbw, threshold = headline_busbw(rows, headline_min_bytes)
    factor = busbw_factor(op, ranks)
    fit = fit_alpha_beta([(r["bytes"] * factor, r["time_us"] / 1e6) for r in rows if r["time_us"] > 0])
    return dict({"busbw_GBps": busbw, "headline_min_bytes": threshold, "factor": factor}, **fit)


def metrics(ops: list, rows: list, ranks: int, headline_min_bytes: int) -> dict:
    """The record's metrics: all rows (keyed by their `op` field), per-op summaries in `ops`, and
    at the top the summary of the headline op: the first listed op that moves data (barrier only
    when it is the only op). throughput/unit repeat the headline busbw for the shared tools."""
    per_op = {op: summarize_op(op, [r for r in rows if r["op"] == op], ranks, headline_min_bytes)
              for op in ops}
    headline = next((op for op in ops if op != "barrier"), ops[0])
    top = per_op[headline]
    return {"rows": rows, "ops": per_op, "op": headline, "busbw_GBps": top["busbw_GBps"],
            "alpha_us": top["alpha_us"], "bandwidth_GBps": top["bandwidth_GBps"],
            "headline_min_bytes": top["headline_min_bytes"], "throughput": top["busbw_GBps"],
            "unit": "GB/s", "wrong": sum(r["wrong"] for r in rows)}


# ---------------------------------------------------------------- console table
_HEAD = ("#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")
_UNITS = ("#", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")
_WIDTHS = (1, 12, 12, 9, 6, 5, 10, 8, 8, 7)


def _line(values) -> str:
    return " ".join(str(v).rjust(w) for v, w in zip(values, _WIDTHS))


def table(op: str, rows: list, ranks: int, dtype: str, redop: str, summary: dict) -> str:
    """nccl-tests' layout for one op (in-place columns only: Paddle's collectives work in place
    or into one output buffer), then its average busbw and the fit."""
    reduces = op_entry(op).reduces
    root = ROOT if op_entry(op).rooted else -1
    lines = [f"# {op}: {ranks} ranks, {dtype}, redop {redop if reduces else 'none'}, "
             f"busbw factor {busbw_factor(op, ranks):.4g}", _line(_HEAD), _line(_UNITS)]
    for r in rows:
        lines.append(_line(("", r["bytes"], r["count"], dtype, redop if reduces else "none", root,
                            f"{r['time_us']:.2f}", f"{r['algbw_GBps']:.3f}", f"{r['busbw_GBps']:.3f}",
                            r["wrong"])))
    bandwidth = summary["bandwidth_GBps"]
    lines.append(f"# Avg bus bandwidth    : {summary['busbw_GBps']:.4f} GB/s "
                 f"(sizes >= {summary['headline_min_bytes']} B)")
    lines.append(f"# Fit time = alpha + bytes x factor / bandwidth: alpha {summary['alpha_us']:.2f} us, "
                 f"bandwidth {'-' if bandwidth is None else f'{bandwidth:.4f}'} GB/s, "
                 f"worst relative error {summary['fit_max_rel_error']:.1%}")
    return "\n".join(lines)


# ---------------------------------------------------------------- correctness check
def values(rank: int, start: int, count: int) -> np.ndarray:
    """What rank `rank` puts at elements start..start+count of a buffer: small integers 1..7,
    exact in float16 and bfloat16, different on neighbouring ranks (so max and misplaced chunks
    show)."""
    period = (np.arange(start, start + PATTERN) + 3 * rank) % PATTERN + 1
    return np.resize(period.astype(np.float32), count)  # tiled: no index array of the buffer's size


def _period(rank: int, start: int) -> np.ndarray:
    """The 7 values rank `rank` puts at elements start..start+7 (`values` tiles them)."""
    return values(rank, start, PATTERN)


def _reduce(arrays, redop: str) -> np.ndarray:
    out = arrays[0].copy()
    for a in arrays[1:]:
        out = out + a if redop == "sum" else np.maximum(out, a)
    return out


@dataclasses.dataclass(frozen=True)
class Expected:
    """What an output must hold, by period: segment k is `segments[k][0]` elements tiling the
    7-element `segments[k][1]`. Every rank's fill repeats every 7 elements, so sums and maxima over
    ranks do too: the check never needs a buffer-size host copy (one copy per rank
    is ~80 GiB at an 8 GiB step). `terms`: values summed into each element (rounding)."""
    segments: tuple
    terms: int = 1

    @property
    def size(self) -> int:
        return sum(length for length, _ in self.segments)

    def block(self, start: int, stop: int) -> np.ndarray:
        """Elements start..stop as an array (stop - start elements)."""
        parts, offset = [], 0
        for length, period in self.segments:
            lo, hi = max(start, offset), min(stop, offset + length)
            if lo < hi:
                phase = np.roll(period, -((lo - offset) % PATTERN))
                parts.append(np.resize(phase, hi - lo))
            offset += length
        if len(parts) == 1:
            return parts[0]  # no second buffer-size copy for the one-segment case
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def send_fill(op: str, rank: int, ranks: int, count: int) -> Optional[tuple]:
    """This rank's input buffer as (elements, period): the buffer tiles the PATTERN values of
    `period` from its first element (period None: zeros), so it is built on the device, in the
    op's dtype, from these few values (a float32 host copy of the buffer, a
    float32 device copy and a cast ran float16 and bfloat16 checks out of memory at nccl_full's
    sizes). None for barrier. Broadcast's non-root ranks send nothing: their buffer starts at
    zero, so a broadcast that does not arrive shows."""
    if op == "barrier":
        return None
    if op == "all_gather":
        return count // ranks, _period(rank, 0)
    if op == "broadcast" and rank != ROOT:
        return count, None
    return count, _period(rank, 0)


def send_values(op: str, rank: int, ranks: int, count: int) -> Optional[np.ndarray]:
    """send_fill spelled out as one array: for tests and small buffers only (it is buffer-size)."""
    fill = send_fill(op, rank, ranks, count)
    if fill is None:
        return None
    length, period = fill
    return np.zeros(length, dtype=np.float32) if period is None else np.resize(period, length)


def expected_periodic(op: str, rank: int, ranks: int, count: int, redop: str) -> Optional[Expected]:
    """What this rank's output must hold after `op`, by period, or None when it holds nothing to
    check (barrier, reduce on a non-root rank)."""
    chunk = count // ranks if op_entry(op).chunked else count
    everyone = range(ranks)
    summed = ranks if redop == "sum" else 1
    if op == "all_reduce" or (op == "reduce" and rank == ROOT):
        return Expected(((count, _reduce([_period(r, 0) for r in everyone], redop)),), summed)
    if op == "all_gather":
        return Expected(tuple((chunk, _period(r, 0)) for r in everyone))
    if op == "reduce_scatter":
        return Expected(((chunk, _reduce([_period(r, rank * chunk) for r in everyone], redop)),), summed)
    if op == "alltoall":
        return Expected(tuple((chunk, _period(r, rank * chunk)) for r in everyone))
    if op == "broadcast":
        return Expected(((count, _period(ROOT, 0)),))
    if op == "sendrecv":
        return Expected(((count, _period((rank - 1) % ranks, 0)),))
    return None


def expected(op: str, rank: int, ranks: int, count: int, redop: str) -> Optional[np.ndarray]:
    """expected_periodic as one array: for tests and small buffers only (it is buffer-size)."""
    want = expected_periodic(op, rank, ranks, count, redop)
    return None if want is None else want.block(0, want.size)


def corrupt(buffer: np.ndarray) -> np.ndarray:
    """debug.corrupt_rank: one wrong element (the last) in what this rank sends. The value is
    above every legitimate one, so sum and max both carry it into the result."""
    out = buffer.copy()
    if out.size:
        out[-1] = CORRUPT_VALUE
    return out


MANTISSA_BITS = {"float32": 23, "float16": 10, "bfloat16": 7}
CHECK_BLOCK = 1 << 20  # elements compared at a time: the check's temporaries stay a few MiB


def tolerance(dtype: str, terms: int) -> float:
    """Allowed |error| relative to the expected value when `terms` values were summed in `dtype`:
    each of the terms - 1 additions rounds by at most half an ulp of a partial sum no larger than
    the result (2^-(mantissa+1) relative), so a fixed figure gave false wrongs once sums passed
    2^(mantissa+1) (bfloat16 above ~37 ranks). Never below TOLERANCE."""
    return max(TOLERANCE[dtype], terms * 2.0 ** -(MANTISSA_BITS[dtype] + 1))


@dataclasses.dataclass(frozen=True)
class Blocks:
    """An output read a part at a time: `read(start, stop)` gives those elements as a float32
    array, so the check never holds the whole buffer on the host, nor a float32 copy of a half-
    precision one on the device (collectives.Collective.received)."""
    size: int
    read: Callable[[int, int], np.ndarray]


def count_wrong(received, want, dtype: str) -> int:
    """Elements of `received` (an array or Blocks) that differ from `want` (an array or
    Expected) beyond the type's rounding (nccl-tests' #wrong), compared CHECK_BLOCK elements at a
    time."""
    if want is None:
        return 0
    if not isinstance(received, Blocks):
        received = Blocks(received.size if received.ndim == 1 else -1, lambda a, b, r=received: r[a:b])
    if received.size != want.size:
        return int(want.size)
    periodic = isinstance(want, Expected)
    rel = tolerance(dtype, want.terms if periodic else 1)
    wrong = 0
    for start in range(0, want.size, CHECK_BLOCK):
        stop = min(start + CHECK_BLOCK, want.size)
        block = want.block(start, stop) if periodic else want[start:stop]
        got = received.read(start, stop).astype(np.float32, copy=False)
        bad = ~(np.abs(got - block) <= rel * np.maximum(1.0, np.abs(block)))  # NaN counts as wrong
        wrong += int(np.count_nonzero(bad))
    return wrong
