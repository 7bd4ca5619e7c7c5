"""`fleetbench cluster down --name N` without N's state file: what carries N's mark goes, with the
processes of N's nodes and N's host daemons; what has N's names without the mark stays."""
import contextlib
import os
import signal
import subprocess
import sys

import pytest
from util import cluster_name as unique_cluster_name
from util import wait_for

from fleetbench.emulate import netem, netem_state, orphans
from fleetbench.emulate import netem_plan as plan

PROBLEM = netem.requirements_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

# waits on stdin (never given): a process that runs until it is stopped
WAITER = "import sys; print('up', flush=True); sys.stdin.read()"
# the same, deaf to TERM: only the KILL after the grace period stops it
DEAF = "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); sys.stdin.read()"


def _in_node(netns: str, code: str) -> subprocess.Popen:
    """A Python process in `netns` (`ip netns exec` execs it: the pid is Python's), once it runs."""
    proc = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


@pytest.mark.parametrize("nodes, busy, deaf", [(2, [0], None), (3, [2], 1), (2, [0, 1], 0)])
def test_down_without_the_state_removes_the_marked_cluster_and_stops_its_nodes_processes(
        tmp_path, monkeypatch, capsys, nodes, busy, deaf):
    name = unique_cluster_name()
    made, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    monkeypatch.setattr(orphans, "GRACE_S", 1.0)
    foreign = f"{name}-node{nodes + 3}"  # N's name pattern, someone else's namespace: no mark
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    procs = {}
    try:
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(made))
        netem.up(nodes, plan.shaping_from("1gbe"), prefix=name)
        procs = {i: _in_node(f"{name}-node{i}", DEAF if i == deaf else WAITER) for i in busy}
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(elsewhere))  # not where the state is
        assert netem_state.read_state(name) is None
        assert netem.cli(["down", "--name", name]) == 0
        out, err = capsys.readouterr()
        assert f"no state of cluster {name} at {elsewhere}/cluster-{name}.json" in err
        removed = out.strip().removeprefix("removed: ").split(", ")
        expected = {f"link {name}-br", *(f"link {name}-h{i}" for i in range(nodes)),
                    *(f"netns {name}-node{i}" for i in range(nodes)),
                    *(f"etc /etc/netns/{name}-node{i}" for i in range(nodes))}
        assert expected <= set(removed)
        stopped = {r for r in removed if r.startswith("process ")}
        assert {r.split()[1] for r in stopped} == {str(p.pid) for p in procs.values()}
        for i, proc in procs.items():  # stopped by TERM, or by KILL when deaf to it
            assert proc.wait(timeout=30) == (-signal.SIGKILL if i == deaf else -signal.SIGTERM)
        assert wait_for(lambda: netem.leftovers(name) == [foreign], 30), netem.leftovers(name)
        assert not [d for d in os.listdir("/etc/netns") if d.startswith(f"{name}-")] \
            if os.path.isdir("/etc/netns") else True
        assert netem.down(name) == []  # done: a second `down` finds nothing
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(made))
        assert netem.down(name) == [] and netem_state.read_state(name) is None  # its state names only what is gone
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "netns", "del", foreign])
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(made))
        netem.down(name)


def test_a_name_never_up_has_nothing_to_remove(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(tmp_path))
    assert netem.cli(["down", "--name", unique_cluster_name()]) == 0
    out, err = capsys.readouterr()
    assert out.strip().endswith("nothing to remove") and err == ""


def _munged(directory) -> int:
    """munged as fleetbench.emulate.slurmd starts it, its files in `directory`; its pid."""
    os.makedirs(directory)
    key = os.path.join(directory, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o600)
    subprocess.run(["munged", "-f", f"--socket={directory}/munge.socket", f"--key-file={key}",
                    f"--log-file={directory}/munged.log", f"--pid-file={directory}/munged.pid",
                    f"--seed-file={directory}/munged.seed"], check=True, timeout=30)
    assert wait_for(lambda: os.path.exists(f"{directory}/munged.pid"), 30)
    with open(f"{directory}/munged.pid") as f:
        return int(f.read())


@pytest.mark.skipif(not os.path.exists("/usr/sbin/munged"), reason="munge is not installed (make deps)")
def test_the_host_daemons_of_the_name_and_no_others_are_stopped(tmp_path):
    name, other = unique_cluster_name(), unique_cluster_name()
    ours, theirs = _munged(tmp_path / f"slurm-{name}"), _munged(tmp_path / f"slurm-{other}")
    try:
        assert orphans.host_daemons(name) == [ours]
        assert orphans.stop(orphans.host_daemons(name)) == [f"process {ours} (munged)"]
        assert wait_for(lambda: not os.path.exists(f"/proc/{ours}/exe"), 30)
        assert orphans.host_daemons(other) == [theirs] and orphans.host_daemons(name) == []
    finally:
        for pid in (ours, theirs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
