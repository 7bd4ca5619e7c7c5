"""Other processes on the GPUs a job uses, from `nvidia-smi --query-compute-apps` (the interference
figure of GPU runs: measure/interference.py, metrics.interference_gpu_procs).

`parse` is pure; `others` runs nvidia-smi. A GPU is the job's when one of the job's processes holds
a context on it; a process on such a GPU that is not the job's is a neighbour (another user's
training, a stray notebook) sharing its SMs and memory bandwidth.
"""
from __future__ import annotations

import subprocess
from collections.abc import Collection

QUERY = ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader,nounits"]


def parse(text: str) -> list[tuple[int, str]]:
    """(pid, GPU uuid) per compute process; lines that are not `PID, UUID` (nvidia-smi's
    "No running processes found", "[N/A]") are skipped."""
    apps = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1]:
            apps.append((int(parts[0]), parts[1]))
    return apps


def count_others(apps: list[tuple[int, str]], job_pids: Collection[int]) -> int | None:
    """Processes not in `job_pids` on a GPU where one of `job_pids` runs; None when none of the
    job's processes is listed (a container whose pid namespace hides the host's pids: nothing can
    be told)."""
    mine = {uuid for pid, uuid in apps if pid in job_pids}
    if not mine:
        return None
    return len({pid for pid, uuid in apps if uuid in mine and pid not in job_pids})


def others(job_pids: Collection[int], timeout_s: float = 10.0) -> int | None:
    """`count_others` from nvidia-smi now; None when it cannot be asked or does not answer."""
    try:
        out = subprocess.run(QUERY, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return count_others(parse(out.stdout), job_pids) if out.returncode == 0 else None
