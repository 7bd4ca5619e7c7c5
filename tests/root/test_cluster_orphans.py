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


@pytest.fixture(params=["absent", "present"])
def netns_etc(request, tmp_path, monkeypatch):
    """/etc/netns as a new machine has it (absent) or a used one (present, with someone else's
    entry): the hosts directories go to a directory of the test's, so the machine's own /etc/netns,
    there or not, decides nothing. `ip netns exec` still works (it mounts only what it finds)."""
    etc = tmp_path / "etc-netns"
    if request.param == "present":
        (etc / "someone-else").mkdir(parents=True)
    monkeypatch.setattr(netem_state, "NETNS_ETC", str(etc))
    return etc


def _entries(etc) -> list[str]:
    return sorted(os.listdir(etc)) if os.path.isdir(etc) else []


@pytest.mark.parametrize("nodes, busy, deaf", [(2, [0], None), (3, [2], 1), (2, [0, 1], 0)])
def test_down_without_the_state_removes_the_marked_cluster_and_stops_its_nodes_processes(
        tmp_path, monkeypatch, capsys, netns_etc, nodes, busy, deaf):
    name = unique_cluster_name()
    before = _entries(netns_etc)
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
                    *(f"etc {netns_etc}/{name}-node{i}" for i in range(nodes))}
        assert expected <= set(removed)
        stopped = {r for r in removed if r.startswith("process ")}
        assert {r.split()[1] for r in stopped} == {str(p.pid) for p in procs.values()}
        for i, proc in procs.items():  # stopped by TERM, or by KILL when deaf to it
            assert proc.wait(timeout=30) == (-signal.SIGKILL if i == deaf else -signal.SIGTERM)
        assert wait_for(lambda: netem.leftovers(name) == [foreign], 30), netem.leftovers(name)
        assert _entries(netns_etc) == before  # the shared directory stays, as does what others keep there
        assert netem.down(name) == []  # done: a second `down` finds nothing
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(made))
        assert netem.down(name) == [] and netem_state.read_state(name) is None  # its state names only what is gone
        assert _entries(netns_etc) == before and os.path.isdir(netns_etc)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "netns", "del", foreign])
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(made))
        netem.down(name)


@pytest.mark.parametrize("first_down_has_state", [True, False])
def test_two_clusters_up_each_down_leaves_the_other_whole(tmp_path, monkeypatch, netns_etc, first_down_has_state):
    """/etc/netns is shared: whichever cluster made it, neither `down` removes it or the other's
    entries, with its state file or without (by its mark)."""
    a, b = unique_cluster_name(), unique_cluster_name()
    before = _entries(netns_etc)
    monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(tmp_path / "state"))
    try:
        netem.up(2, plan.shaping_from("unshaped"), prefix=a)
        netem.up(2, plan.shaping_from("unshaped"), prefix=b)
        if not first_down_has_state:
            monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(tmp_path / "elsewhere"))
        removed = netem.down(a)
        assert sorted(r for r in removed if r.startswith("etc ")) == [f"etc {netns_etc}/{a}-node{i}" for i in range(2)]
        assert not [r for r in removed if f" {b}" in r or r.startswith("etcdir")], removed
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(tmp_path / "state"))
        assert netem.down(a) == [] and netem_state.read_state(a) is None  # nothing of a's is left
        assert netem.status(b) is not None  # b's namespaces, links and hosts files all there and marked
        assert _entries(netns_etc) == sorted(before + [f"{b}-node0", f"{b}-node1"])
        assert sorted(netem.down(b)) == sorted([f"link {b}-br", *(f"link {b}-h{i}" for i in range(2)),
                                                *(f"netns {b}-node{i}" for i in range(2)),
                                                *(f"etc {netns_etc}/{b}-node{i}" for i in range(2))])
        assert _entries(netns_etc) == before and os.path.isdir(netns_etc)
    finally:
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(tmp_path / "state"))
        netem.down(a)
        netem.down(b)


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
