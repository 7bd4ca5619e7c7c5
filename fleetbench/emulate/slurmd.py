"""`fleetbench slurmd up|down`: a real Slurm on the emulated cluster (Debian's slurm-wlm and munge).

`up` (root; the cluster must be up) writes, in a directory of its own (<state dir>/slurm-NAME):
a munge key, `slurm.conf` (nodes n0..nN-1 at the nodes' addresses, one partition `emu`,
proctrack/linuxproc, no accounting), `cgroup.conf`; then starts munged (its own socket),
slurmctld on this machine at the head's address on the cluster bridge, and one slurmd per node
inside the node's namespace. The system's /etc/slurm and /etc/munge are not read or changed:
clients find the cluster through SLURM_CONF, which `up` prints.

`ip netns exec` mounts a fresh /sys, without the cgroup hierarchies slurmd 22.05 insists on
(`error: No filesystem mounted on /sys/fs/cgroup ... slurmd initialization failed`), so each
slurmd starts from a shell that mounts the cgroup v1 controllers again inside that private
mount namespace (the machine's own mounts are not touched).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib

from fleetbench.emulate import netem, netem_state, sshd

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CGROUPS = "cpuset memory freezer devices cpu cpuacct pids"
SLURMD_SHELL = ("mount -t tmpfs fleetbench-cgroup /sys/fs/cgroup && for c in {cg}; do mkdir -p /sys/fs/cgroup/$c && "
                "mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c; done && exec slurmd -f \"$0\" -N \"$1\"")


def requirements_problem() -> str | None:
    problem = netem.requirements_problem()
    if problem:
        return problem
    missing = [d for d in DAEMONS + ("/usr/bin/srun",) if not os.path.exists(d)]
    return (f"an emulated Slurm needs {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)"
            if missing else None)


def directory(prefix: str) -> str:
    return os.path.join(netem_state.state_dir(), f"slurm-{prefix}")


def node_name(index: int) -> str:
    return f"n{index}"


def controller_port(prefix: str) -> int:
    # slurmctld listens on this machine: clusters of different names must not share a port
    return 16817 + zlib.crc32(prefix.encode()) % 1000


def slurm_conf(d: str, layout: netem.Layout, prefix: str, cpus: int) -> str:
    addr, _ = sshd.head_address(layout)
    nodes = [f"NodeName={node_name(n.index)} NodeAddr={n.ip} CPUs={cpus} State=UNKNOWN" for n in layout.nodes]
    names = ",".join(node_name(n.index) for n in layout.nodes)
    settings = {
        "ClusterName": f"fleetbench{prefix}", "SlurmctldHost": f"{socket.gethostname()}({addr})",
        "SlurmUser": "root", "SlurmdUser": "root", "AuthType": "auth/munge", "CredType": "cred/munge",
        "AuthInfo": f"socket={d}/munge.socket", "StateSaveLocation": f"{d}/state",
        "SlurmdSpoolDir": f"{d}/spool-%n", "SlurmctldPidFile": f"{d}/slurmctld.pid",
        "SlurmdPidFile": f"{d}/slurmd-%n.pid", "SlurmctldPort": controller_port(prefix), "SlurmdPort": 6818,
        "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none", "JobAcctGatherType": "jobacct_gather/none",
        "MpiDefault": "none", "ReturnToService": 2, "SchedulerType": "sched/builtin",
        "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_CPU", "JobCompType": "jobcomp/none",
        "AccountingStorageType": "accounting_storage/none", "SlurmctldLogFile": f"{d}/slurmctld.log",
        "SlurmdLogFile": f"{d}/slurmd-%n.log", "SlurmdTimeout": 30, "InactiveLimit": 0, "KillWait": 5,
    }
    return "\n".join([f"{k}={v}" for k, v in settings.items()] + nodes +
                     [f"PartitionName=emu Nodes={names} Default=YES MaxTime=INFINITE State=UP", ""])


# slurmstepd listens on <SlurmdSpoolDir>/<node>_<job>.<step>; a Unix socket path holds 107 bytes, and a
# longer one fails the job's launch, which Slurm then holds forever ("launch failed requeued held").
SOCKET_PATH_MAX = 107
STEP_SOCKET_TAIL = len("_1234567.4294967291")  # a job id of up to 7 digits, the batch step's id


def _check_socket_room(d: str, layout) -> None:
    longest = max(len(os.path.join(d, f"spool-{node_name(n.index)}", node_name(n.index))) for n in layout.nodes)
    if longest + STEP_SOCKET_TAIL > SOCKET_PATH_MAX:
        raise netem.ClusterError(
            f"{d}: too long for Slurm's step sockets ({longest + STEP_SOCKET_TAIL} > {SOCKET_PATH_MAX} bytes): "
            f"set FLEETBENCH_CLUSTER_STATE_DIR to a shorter directory")


def up(prefix: str = netem.DEFAULT_PREFIX) -> dict:
    """Start munged, slurmctld and one slurmd per node; returns {slurm_conf, nodes}."""
    problem = requirements_problem()
    if problem:
        raise netem.ClusterError(problem)
    layout = sshd.cluster_layout(prefix)
    d = directory(prefix)
    _check_socket_room(d, layout)
    for sub in ["state"] + [f"spool-{node_name(n.index)}" for n in layout.nodes]:
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    os.chmod(d, 0o700)
    if not os.path.exists(os.path.join(d, "munge.key")):
        with open(os.path.join(d, "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(os.path.join(d, "munge.key"), 0o600)
    conf = os.path.join(d, "slurm.conf")
    with open(conf, "w") as f:
        f.write(slurm_conf(d, layout, prefix, os.cpu_count() or 1))
    with open(os.path.join(d, "cgroup.conf"), "w") as f:
        f.write("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
    sshd.attach_head(layout)
    _daemon(d, "munged", ["munged", "-f", f"--socket={d}/munge.socket", f"--key-file={d}/munge.key",
                          f"--log-file={d}/munged.log", f"--pid-file={d}/munged.pid", f"--seed-file={d}/munged.seed"])
    _daemon(d, "slurmctld", ["slurmctld", "-f", conf])
    for n in layout.nodes:
        _daemon(d, f"slurmd-{node_name(n.index)}", ["ip", "netns", "exec", n.netns, "sh", "-c",
                                                     SLURMD_SHELL.format(cg=CGROUPS), conf, node_name(n.index)])
    _wait_idle(conf, len(layout.nodes))
    return {"slurm_conf": conf, "nodes": [node_name(n.index) for n in layout.nodes]}


def _daemon(d: str, name: str, cmd: list[str]) -> None:
    if _pid(d, name):
        return
    netem_state.run(cmd)
    deadline = time.monotonic() + 15
    while not _pid(d, name):
        if time.monotonic() > deadline:
            raise netem.ClusterError(f"{name} did not start (see {d}/{name}.log)")
        time.sleep(0.1)


# How long slurmctld and the slurmds may take to come up and register. 30 s is not enough on a
# 2-core machine running four test sessions (sinfo answers nothing yet); a quiet one
# takes a few seconds, and a cluster that never comes up is still refused, naming its logs.
IDLE_TIMEOUT_S = 120


def _wait_idle(conf: str, count: int, timeout_s: float = IDLE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=dict(os.environ, SLURM_CONF=conf),
                             capture_output=True, text=True, timeout=30).stdout.split()
        if out[1::2].count("idle") == count:
            return
        if time.monotonic() > deadline:
            states = " ".join(out) or "sinfo answered nothing (slurmctld not up)"
            raise netem.ClusterError(f"Slurm nodes not idle after {timeout_s:g} s: {states} "
                                     f"(logs in {os.path.dirname(conf)})")
        time.sleep(0.5)


def _pid(d: str, name: str) -> int | None:
    """The pid in <d>/<name>.pid if that process is one of the Slurm/munge daemons, else None
    (links resolved: Debian links slurmctld to slurmctld-wlm)."""
    return netem_state.daemon_pid(os.path.join(d, f"{name}.pid"), DAEMONS)


def down(prefix: str = netem.DEFAULT_PREFIX) -> list[int]:
    """Stop the daemons whose pid files we wrote (slurmds, slurmctld, munged); remove the directory."""
    d = directory(prefix)
    if not os.path.isdir(d):
        return []
    names = sorted(f[:-4] for f in os.listdir(d) if f.endswith(".pid"))
    order = [n for n in names if n.startswith("slurmd-")] + [n for n in ("slurmctld", "munged") if n in names]
    stopped = []
    for name in order:
        pid = _pid(d, name)
        if pid:
            os.kill(pid, signal.SIGTERM)
            stopped.append(pid)
            deadline = time.monotonic() + 10
            while _pid(d, name) and time.monotonic() < deadline:
                time.sleep(0.1)
    shutil.rmtree(d, ignore_errors=True)
    return stopped


def parser():
    return netem.node_daemons_parser("slurmd", __doc__.splitlines()[0])


def cli(argv: list[str]) -> int:
    return netem.node_daemons_cli(
        "slurmd", __doc__.splitlines()[0], argv, sys.modules[__name__],
        lambda info: (f"Slurm nodes {', '.join(info['nodes'])} idle in partition emu\n"
                      f"export SLURM_CONF={info['slurm_conf']}   # then: sinfo; salloc -N2; sbatch ..."),
        lambda name: f"cluster {name}: no Slurm daemons of ours")
