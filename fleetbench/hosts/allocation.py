"""The nodes of the Slurm allocation this runs in (`salloc`, or the script `sbatch` runs on the
first node), as hosts reached by `srun` (fleetbench.hosts.reach): `fleetbench launch`, sweeps and
`fleetbench diagnose` with `--executor slurm` take them from here.

The nodes come from SLURM_JOB_NODELIST, in Slurm's order: the first node is node 0 and hosts the
master. The list is expanded by `scontrol show hostnames` when Slurm's tools are on PATH, else by
`expand_nodelist` (Slurm's compact form: `gpu[01-04,07],login1`). Each node is reached at its
NodeAddr (a node's name need not resolve), and each job step gets all the node's CPUs
(SLURM_CPUS_ON_NODE; otherwise Slurm would pin a step to one CPU).
"""
from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping

from fleetbench.hosts.hostlist import Host, HostsError
from fleetbench.hosts.reach import resolve


def expand_nodelist(text: str) -> list[str]:
    """'n[01-03,7],login' -> ['n01', 'n02', 'n03', 'n7', 'login'] (Slurm's hostlist form;
    several bracket groups in one name multiply out)."""
    names = []
    for entry in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text.strip()):
        parts = re.split(r"(\[[^\]]*\])", entry)
        choices = [_bracket(p, text) if p.startswith("[") else [p] for p in parts if p]
        names += ["".join(c) for c in itertools.product(*choices)]
    if not names:
        raise HostsError(f"SLURM_JOB_NODELIST {text!r}: no nodes")
    return names


def _bracket(group: str, text: str) -> list[str]:
    out = []
    for item in group[1:-1].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item.strip())
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise HostsError(f"SLURM_JOB_NODELIST {text!r}: bad range {item!r} (expected like [01-04,07])")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        out += [str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1)]
    return out


def allocation_hosts(env: Mapping[str, str] | None = None) -> list[str]:
    """The allocation's node names in Slurm's order (HostsError outside an allocation)."""
    env = os.environ if env is None else env
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise HostsError("--executor slurm: not inside a Slurm allocation (SLURM_JOB_NODELIST is unset); "
                         "run under salloc or sbatch (fleetbench slurm SWEEP.yaml writes the script)")
    out = _scontrol("show", "hostnames", nodelist)
    return out.split() if out and out.split() else expand_nodelist(nodelist)


def _scontrol(*args: str) -> str | None:
    """scontrol's output, or None when it is not there or does not answer (no Slurm config here)."""
    if not shutil.which("scontrol"):
        return None
    try:
        out = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return None
    return out.stdout if out.returncode == 0 else None


def node_addr(name: str) -> str:
    """The address Slurm itself uses for node `name` (its NodeAddr; a node's name need not
    resolve), falling back to the name when scontrol is not there."""
    found = re.search(r"\bNodeAddr=(\S+)", _scontrol("show", "node", "-o", name) or "")
    return found.group(1) if found else name


def slurm_hosts(env: Mapping[str, str] | None = None, python: str | None = None,
                workdir: str | None = None) -> list[Host]:
    """The allocation's nodes as hosts reached by srun, addresses resolved first (a name that does
    not resolve is one line naming it before anything starts)."""
    env = os.environ if env is None else env
    return [Host(name, reach="slurm", index=i, address=resolve(node_addr(name), i, name),
                 python=python or sys.executable, workdir=workdir, cpus=env.get("SLURM_CPUS_ON_NODE"))
            for i, name in enumerate(allocation_hosts(env))]
