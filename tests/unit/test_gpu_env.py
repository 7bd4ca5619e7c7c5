"""issue 26 finding 7, env side: a CUDA build whose NCCL cannot be loaded keeps its version, commit
and CUDA in the record; only the NCCL entry says why it is missing. The fact is constructed (no GPU
here): core.nccl_version raising, as a CUDA build does when libnccl.so is absent (untested here)."""
import sys
import types

from fleetbench.machine import env


def test_missing_nccl_does_not_null_the_paddle_block(monkeypatch):
    def no_nccl():
        raise RuntimeError("libnccl.so.2: cannot open shared object file")

    monkeypatch.setitem(sys.modules, "paddle.base.core", types.SimpleNamespace(nccl_version=no_nccl))
    version, reason = env._nccl_version()
    assert version is None and reason == "NCCL version unavailable: RuntimeError"


def test_nccl_version_is_decoded_when_present(monkeypatch):
    monkeypatch.setitem(sys.modules, "paddle.base.core", types.SimpleNamespace(nccl_version=lambda: 21602))
    assert env._nccl_version() == ("2.16.2", None)
