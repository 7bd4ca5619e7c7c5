"""Checks made before a job starts: a bad input is one line naming the flag, exit 2, no process
of the job started and nothing stored (instead of a traceback after minutes of training).
"""
from __future__ import annotations

import json
import subprocess
import sys

from fleetbench import cmdline

# Paddle's own device parsing (paddle/distributed/launch/context/device.py), run in a child so
# the launcher itself does not import paddle: the device type and the ids --devices may name.
DEVICE_PROBE = """import json
from paddle.distributed.launch.context.device import Device
d = Device.parse_device()
print(json.dumps({"type": d.dtype, "labels": d.labels}))"""


class LaunchError(cmdline.UserError):
    """Bad input; the message is one line naming the flag or file."""


def visible_devices(env: dict, timeout: float = 120) -> dict | None:
    """{'type': 'gpu'|'xpu'|'cpu'|..., 'labels': [...]} as Paddle's launcher will see them, or
    None when that cannot be told (Paddle's launcher then decides)."""
    try:
        p = subprocess.run([sys.executable, "-c", DEVICE_PROBE], env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    found = [line for line in p.stdout.splitlines() if line.startswith("{")]
    return json.loads(found[-1]) if p.returncode == 0 and found else None


def check_devices(flag: str, ids: str, env: dict) -> None:
    """Raise LaunchError unless every device id in `ids` ('0,1,2') is one Paddle can use here."""
    problem = device_problem(flag, ids, visible_devices(env))
    if problem:
        raise LaunchError(problem)


def device_problem(flag: str, ids: str, found: dict | None) -> str | None:
    """Why `ids` cannot run on the devices `found` (visible_devices' answer), or None. Apart from
    the probe so that the GPU and XPU answers are tested on a CPU-only machine too."""
    if found is None:
        return None  # Paddle's launcher decides
    if found["type"] == "cpu":
        return (f"{flag} {ids}: this Paddle build sees no GPU or other device (it runs on CPU); "
                f"on CPU give --nproc_per_node N instead")
    missing = [d for d in ids.split(",") if d not in found["labels"]]
    if missing:
        return (f"{flag} {ids}: device(s) {','.join(missing)} not visible here (visible "
                f"{found['type']} devices: {','.join(found['labels']) or 'none'})")
    return None


def count_problem(nproc: str | None, flag: str | None, ids: str | None, found: dict | None) -> str | None:
    """Why --nproc_per_node does not fit the devices Paddle's launcher hands its ranks, or None.
    Rank i takes the i-th entry of the device list, else of every visible GPU (paddle/distributed/
    launch/controllers/collective.py, 2.6.2 and 3.3.1), so fewer ranks than listed devices leave
    devices idle and more fail inside the launcher (IndexError); a CPU build hands out none."""
    if not nproc:
        return None
    n = int(nproc)
    if ids:
        listed = ids.split(",")
        if n == len(listed):
            return None
        what = (f"devices {','.join(listed[n:])} would stay idle" if n < len(listed)
                else f"ranks {len(listed)}-{n - 1} would have no device")
        return (f"--nproc_per_node {n} with {flag} {ids} ({len(listed)} devices): Paddle's launcher gives rank i the "
                f"i-th listed device, so {what}; leave out --nproc_per_node (one rank per listed device) or list "
                f"{n} devices")
    if found and found["type"] == "gpu" and n > len(found["labels"]):
        return (f"--nproc_per_node {n}: {len(found['labels'])} GPU(s) are visible here "
                f"({','.join(found['labels'])}) and Paddle's launcher gives each rank one; run at most "
                f"{len(found['labels'])} ranks a node")
    return None


def ranks_per_node(nproc: str | None, devices: str | None, env: dict, found: dict | None) -> int:
    """How many ranks Paddle's launcher starts on this node (`pod_replicas` in paddle/distributed/
    launch/controllers/controller.py, the same in 2.6.2 and 3.3.1): --nproc_per_node, else one per
    --devices entry, else one per device Device.parse_device sees (`found`, visible_devices'
    answer): every GPU of a CUDA build, or each CUDA_VISIBLE_DEVICES entry; one where it sees none
    (a CPU node). PADDLE_NPROC_PER_NODE and PADDLE_DEVICES in the environment override the flags
    (Context.set_env_in_args)."""
    nproc = env.get("PADDLE_NPROC_PER_NODE") or nproc
    devices = env.get("PADDLE_DEVICES") or devices
    if nproc:
        return int(nproc)
    if devices:
        return len(devices.split(","))
    return max(1, len(found["labels"])) if found else 1  # Device.count: len(labels) or 1


def check_config(script: str, script_args: list[str], env: dict, timeout: float = 120) -> dict:
    """A benchmark's resolved config from its own `--check` (validates, trains nothing)."""
    try:
        p = subprocess.run([sys.executable, script, *script_args, "--check"], env=env, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{script} --check did not finish within {timeout} s") from None
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        err = [line for line in (p.stderr or p.stdout).strip().splitlines() if line.strip()]
        raise LaunchError(err[-1] if err else f"{script} --check failed with code {p.returncode}")
    return json.loads(lines[-1])
