"""Paddle's own collectives between nodes (`--paddle-links`): the comm benchmark
(collective/comm.py, preset `diagnose`: sendrecv and all_reduce at 32 MiB) launched on two nodes,
or on all of them, by the executors `fleetbench launch` uses (netns on the emulated cluster, ssh,
srun), its record read back from a scratch store.

Where the raw TCP rate says what the wire gives one stream, these figures say what Paddle's
backend (gloo on CPU, NCCL on GPUs: untested here) gets from it: busbw in GB/s, as nccl-tests.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile

from fleetbench.hosts import executors, remote
from fleetbench.hosts.hostlist import Host
from fleetbench.job.paddle_launch import child_env
from fleetbench.job.supervisor import Limits
from fleetbench.measure import registry

SCRIPT = str(registry.REPO_ROOT / "collective" / "comm.py")
PRESET = "diagnose"
# the record's per-op busbw (GB/s) -> the diagnosis figure's name
FIGURES = {"sendrecv": "sendrecv_busbw_GBps", "all_reduce": "allreduce_busbw_GBps"}


def _executor(hosts: list[Host]) -> executors.Executor:
    """The executor `fleetbench launch` uses over these hosts, the first one node 0: the master;
    on ssh and srun nodes the agent finds the benchmark script in this repository's copy there."""
    workdir = str(registry.REPO_ROOT)
    return executors.Executor([dataclasses.replace(h, index=i, workdir=h.workdir or workdir)
                               for i, h in enumerate(hosts)])


def _figures(store: str) -> dict:
    """The busbw of each op from the comm record rank 0 stored, or a one-line error."""
    try:
        with open(store) as f:
            record = json.loads(f.read().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return {"error": "the comm job stored no record"}
    if record.get("error"):
        return {"error": str(record["error"]).splitlines()[0][:300]}
    ops = record["metrics"]["ops"]
    return {name: ops[op]["busbw_GBps"] for op, name in FIGURES.items() if op in ops}


def collective_test(hosts: list[Host], timeout: float) -> dict:
    """sendrecv_busbw_GBps and allreduce_busbw_GBps of one comm job over `hosts` (2 for a link,
    all for the cluster), or {"error": ...} when the job failed: a verdict, not a crash. The job's
    logs are kept when it failed (the error names them), removed when it did not."""
    scratch = tempfile.mkdtemp(prefix="fleetbench-diagnose-")
    store = os.path.join(scratch, "comm.jsonl")
    job = executors.Job("collective", SCRIPT, ("--preset", PRESET, "--results", store), len(hosts), (1,) * len(hosts))
    try:
        outcome = remote.run_job(_executor(hosts), job, os.path.join(scratch, "log"), child_env(),
                                 Limits(timeout=timeout, startup=timeout), store)
    except Exception as e:  # noqa: BLE001  (a node that cannot be started is this test's verdict)
        return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    if not outcome.ok:
        first = (outcome.report().strip().splitlines() or [""])[0].removeprefix("fleetbench launch: ")
        return {"error": f"comm job {first}"[:400]}
    found = _figures(store)
    if "error" not in found:
        shutil.rmtree(scratch, ignore_errors=True)
    return found
