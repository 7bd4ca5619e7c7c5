"""The checks of a multi-host collective launch, run on every node before anything starts there.

The head of a job (a Slurm login node, an ssh jump host) need not have GPUs, nor the nodes' Paddle:
what the devices are, whether Paddle can use them and whether the benchmark's config holds there
(amp needs a GPU) is each node's to say. So `fleetbench launch --hosts ...`
starts, through the job's own transport (ssh, srun), `python -m fleetbench.hosts.nodecheck SPEC` on
each node at once; each answers one `NODECHECK {json}` line:

- the devices Paddle's launcher sees there (its own Device.parse_device, job.preflight) and the
  device list checked against them;
- how many ranks Paddle's launcher will start there (job.preflight.ranks_per_node: the
  --nproc_per_node the head asks for, else one per listed device, else one per visible GPU, one on a
  CPU node), so the head never plans one rank for eight GPUs;
- for a benchmark, its own `--check` there (config, capability, and the GPU readiness check on a
  CUDA build), whose resolved config becomes the job's.

A node that refuses is one line naming it, exit 2, before any launcher starts; nothing is stored.
`fleetbench sweep` on real hosts checks each collective cell's nodes the same way (check_job, through
remote.check_cell), once per cell shape, before any cell runs.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from fleetbench.hosts import reach
from fleetbench.hosts.hostlist import Host
from fleetbench.job import paddle_launch, preflight

if TYPE_CHECKING:  # executors is imported where a job is checked: a node runs run() alone
    from fleetbench.hosts.executors import Executor, Job

PREFIX = "NODECHECK "
TIMEOUT_S = 240.0  # two Paddle imports on a loaded node, and the benchmark's --check


def run(spec: dict) -> dict:
    """On the node: {"ranks", "devices", "config"} or {"error": one line}."""
    env = paddle_launch.child_env(extra=spec["env"])
    flag, ids, nproc = spec.get("device_flag"), spec.get("devices"), spec.get("nproc")
    found = preflight.visible_devices(env)
    problem = (preflight.device_problem(flag, ids, found) if ids else None) or \
        preflight.count_problem(nproc, flag, ids, found)
    if problem:
        return {"error": problem}
    config = None
    if spec.get("check"):
        args = [a.replace(spec["scratch"], tempfile.gettempdir()) for a in spec["args"]]
        try:
            config = preflight.check_config(spec["script"], args, env)
        except preflight.LaunchError as e:
            return {"error": str(e)}
    return {"ranks": preflight.ranks_per_node(nproc, ids, env, found), "devices": found, "config": config}


def check_nodes(nodes: list[Host], specs: list[dict], timeout: float = TIMEOUT_S) -> list[dict]:
    """On the head: every node's answer, in node order, all asked at once the way the job reaches
    its hosts (fleetbench.hosts.reach: ssh, srun); preflight.LaunchError naming the first node that
    refused or did not answer."""
    def ask(node: Host, spec: dict) -> dict:
        argv = [node.python, "-m", "fleetbench.hosts.nodecheck", json.dumps(spec, separators=(",", ":"))]
        try:
            p = subprocess.run(reach.command(node, argv), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"its checks did not finish within {timeout:g} s"}
        lines = [line for line in p.stdout.splitlines() if line.startswith(PREFIX)]
        if not lines:
            tail = [line for line in (p.stderr or p.stdout).strip().splitlines() if line.strip()]
            return {"error": f"its checks ended with exit code {p.returncode}: {tail[-1] if tail else 'no output'}"}
        return json.loads(lines[-1][len(PREFIX):])

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        answers = list(pool.map(ask, nodes, specs))
    for node, answer in zip(nodes, answers):
        if "error" in answer:
            raise preflight.LaunchError(f"node {node.index} ({node.name}): {answer['error']}")
    return answers


def check_job(ex: Executor, job: Job, env: dict, nprocs: Sequence[str | None], *, check: bool,
              device_flag: str | None = None, devices: str | None = None) -> list[dict]:
    """check_nodes for a collective `job` on the first nodes of `ex`: node i asked to start
    nprocs[i] ranks (None: as Paddle's launcher counts them there), on `devices` when given, and
    with `check` the benchmark's own --check there, its --results a scratch file of the node."""
    from fleetbench.hosts import agent, executors

    base = {"device_flag": device_flag, "devices": devices, "env": executors.forwarded_env(env, ex.forward),
            "check": check, "script": executors.script_on_node(job.script), "scratch": agent.SCRATCH,
            "args": executors._results_to_scratch(list(job.args), agent.SCRATCH)}
    return check_nodes(ex.nodes[:job.nodes], [dict(base, nproc=n) for n in nprocs[:job.nodes]])


def main(argv: list[str]) -> int:
    print(PREFIX + json.dumps(run(json.loads(argv[0]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
