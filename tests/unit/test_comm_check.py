"""The comm check by period (issue 26 findings 2 and 7): the same verdicts as full host copies,
computed independently here from every rank's whole buffer, at any block boundary."""
import numpy as np
import pytest

from fleetbench.comm import opmath


def _full(op, rank, ranks, count, redop):
    """The old way: every rank's whole input, reduced or gathered (buffer-size copies)."""
    chunk = count // ranks if opmath.op_entry(op).chunked else count
    send = [opmath.values(r, 0, count) for r in range(ranks)]
    red = np.sum if redop == "sum" else np.max
    if op == "all_reduce":
        return red(np.stack(send), axis=0)
    if op == "all_gather":
        return np.concatenate([opmath.values(r, 0, chunk) for r in range(ranks)])
    if op == "reduce_scatter":
        return red(np.stack(send), axis=0)[rank * chunk:(rank + 1) * chunk]
    if op == "alltoall":
        return np.concatenate([s[rank * chunk:(rank + 1) * chunk] for s in send])
    return send[(rank - 1) % ranks]  # sendrecv


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"])
@pytest.mark.parametrize("redop", ["sum", "max"])
def test_periodic_expected_is_the_full_computation(op, redop, monkeypatch):
    monkeypatch.setattr(opmath, "CHECK_BLOCK", 5)  # blocks straddle periods and segments
    ranks, count = 3, 3 * 41
    for rank in range(ranks):
        want = _full(op, rank, ranks, count, redop)
        periodic = opmath.expected_periodic(op, rank, ranks, count, redop)
        assert np.array_equal(periodic.block(0, periodic.size), want)
        assert np.array_equal(periodic.block(17, 40), want[17:40])
        assert opmath.count_wrong(want, periodic, "float32") == 0
        broken = want.copy()
        broken[[0, 4, 5, len(want) // 2 + 1, len(want) - 1]] += 1
        assert opmath.count_wrong(broken, periodic, "float32") == 5


def test_bfloat16_sums_of_many_ranks_are_not_false_wrongs():
    """64 ranks' sums reach 448, past bfloat16's exact integers (256): the value a bfloat16 sum
    holds there, rounded to 8 significant bits, must pass; a wrong rank's contribution must not."""
    ranks, count = 64, 7 * 10
    want = opmath.expected_periodic("all_reduce", 0, ranks, count, "sum")
    exact = want.block(0, count)
    as_bf16 = (exact.view(np.uint32) & 0xFFFF0000).view(np.float32)  # truncated to bfloat16
    assert np.any(as_bf16 != exact)
    assert opmath.count_wrong(as_bf16, want, "bfloat16") == 0
    off = exact + 4  # two bfloat16 ulps at 448: within 63 roundings, beyond the old fixed 8e-3
    assert opmath.count_wrong(off, want, "bfloat16") == 0
    few = opmath.expected_periodic("all_reduce", 0, 2, count, "sum")
    assert opmath.count_wrong(few.block(0, count) + 4, few, "bfloat16") == count
    assert opmath.count_wrong(exact + 8 * 7, want, "float32") == count
    assert opmath.tolerance("float32", 8) == opmath.TOLERANCE["float32"]


# One rank's fill and check of a half-precision all_reduce buffer, in a process of its own: the peak of
# numpy's allocations (tracemalloc sees them) and of Paddle's host allocator (its tensors on the CPU).
FILL_AND_CHECK = r"""
import json, sys, tracemalloc
import paddle
from paddle.base import core
from fleetbench.comm import collectives, opmath
dtype, count = sys.argv[1], int(sys.argv[2])
peers = collectives.Peers(rank=0, ranks=1, device="cpu", backend="gloo")
c = collectives.Collective("all_reduce", count, peers, collectives.CommConfig(dtype=dtype))
before = core.host_memory_stat_current_value("Allocated", 0)
tracemalloc.start()
c.load()
wrong = opmath.count_wrong(c.received(), opmath.expected_periodic("all_reduce", 0, 1, count, "sum"), dtype)
host = tracemalloc.get_traced_memory()[1]
print(json.dumps({"wrong": wrong, "numpy_peak": host,
                  "paddle_peak": core.host_memory_stat_peak_value("Allocated", 0) - before}))
"""


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_a_buffer_is_filled_and_checked_without_copies_of_its_size(dtype):
    # issue 33 finding 6: the fill was a float32 host array (np.resize), a float32 tensor and a cast,
    # and the check cast the whole output to float32 and copied it to the host: at nccl_full's sizes
    # float16 and bfloat16 ran out of GPU memory. Now the buffer is built in its dtype a block at a
    # time and read back a block at a time: numpy holds a few blocks, Paddle the buffer and a block.
    import json
    import subprocess
    import sys

    count = 1 << 25  # 32 Mi elements: 64 MiB in half precision
    p = subprocess.run([sys.executable, "-c", FILL_AND_CHECK, dtype, str(count)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    size = count * opmath.DTYPE_BYTES[dtype]
    assert got["wrong"] == 0
    assert got["numpy_peak"] < 40 << 20, got  # blocks of opmath.CHECK_BLOCK elements, never the buffer
    assert got["paddle_peak"] < size + (24 << 20), got  # the buffer and a block or two
