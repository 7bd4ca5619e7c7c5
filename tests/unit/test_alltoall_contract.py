"""issue 26 finding 1: the alltoall entry's buffers bind to the installed Paddle's own parameter
names (dist.alltoall_single swapped them between 2.6 and 3.x; dist.stream.alltoall_single did not).
Run under .venv (2.6.2) and .venv3 (3.3.1)."""
import inspect
import types

import paddle.distributed as dist

from fleetbench.comm import opmath


def test_alltoall_passes_recv_as_out_and_send_as_in():
    real = inspect.signature(dist.stream.alltoall_single)
    bound = {}

    def record(*args, **kwargs):
        bound.update(real.bind(*args, **kwargs).arguments)

    fake_dist = types.SimpleNamespace(stream=types.SimpleNamespace(alltoall_single=record))
    buffers = types.SimpleNamespace(send="SEND", recv="RECV")
    opmath.TABLE["alltoall"].call(fake_dist, buffers)
    assert bound["out_tensor"] == "RECV" and bound["in_tensor"] == "SEND"
