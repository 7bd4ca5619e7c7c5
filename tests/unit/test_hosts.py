"""Hostfiles, --hosts lists and which hosts a job uses (pure)."""
import pytest

from fleetbench.hosts import hostlist
from fleetbench.hosts.hostlist import Host, HostsError


def test_hostfile_in_the_deepspeed_horovod_convention():
    text = """
# the cluster
node1 slots=4     # first
node2 slots=2

ops@10.0.0.7
"""
    assert hostlist.parse_hostfile(text) == [Host("node1", 4), Host("node2", 2, index=1),
                                             Host("ops@10.0.0.7", 1, index=2)]
    assert hostlist.parse_hostfile(text)[2].login_host == "10.0.0.7"


@pytest.mark.parametrize("text, message", [
    ("node1 slots=0", "hostfile:1: slots '0' for host node1: expected an integer >= 1"),
    ("node1 slots=two", "hostfile:1: slots 'two' for host node1"),
    ("node1 gpus=2", "hostfile:1: 'gpus=2': expected `HOST slots=N`"),
    ("a;rm slots=1", "hostfile:1: host 'a;rm'"),
    ("a slots=1\na slots=2", "hostfile: host a is listed twice"),
    ("# only a comment\n\n", "hostfile: no hosts listed"),
])
def test_bad_hostfiles_name_the_line(text, message):
    with pytest.raises(HostsError) as err:
        hostlist.parse_hostfile(text)
    assert str(err.value).startswith(message)


def test_missing_hostfile_is_one_line(tmp_path):
    with pytest.raises(HostsError, match=r"^hostfile .*nope: cannot read \(No such file or directory\)$"):
        hostlist.load_hostfile(tmp_path / "nope")


def test_hosts_argument_like_horovod():
    assert hostlist.parse_hosts_arg("a:2,b:2, c") == [Host("a", 2), Host("b", 2, index=1), Host("c", 1, index=2)]
    with pytest.raises(HostsError, match=r"^--hosts: slots 'x' for host a"):
        hostlist.parse_hosts_arg("a:x")


def test_devices_per_node_one_count_or_one_per_node():
    assert hostlist.parse_per_node(2) == (2,)
    assert hostlist.parse_per_node("3+2") == (3, 2)
    assert hostlist.counts_for(3, (2,)) == (2, 2, 2)
    assert hostlist.counts_for(2, (3, 2)) == (3, 2)
    with pytest.raises(HostsError, match=r"^devices_per_node 3\+2: 2 counts for 3 nodes$"):
        hostlist.counts_for(3, (3, 2))
    for bad in ("0", "3+", "3+0", "x", True):
        with pytest.raises(HostsError, match="expected a count >= 1 or one per node like 3\\+2"):
            hostlist.parse_per_node(bad)


def test_a_job_takes_the_first_hosts_in_order_and_needs_their_slots():
    listed = hostlist.parse_hosts_arg("a:4,b:2,c:8")
    chosen = hostlist.select(listed, 2, (3, 2))
    assert [(p.rank, p.host.name, p.processes) for p in chosen] == [(0, "a", 3), (1, "b", 2)]
    assert hostlist.describe(chosen) == "a(3) b(2)"
    with pytest.raises(HostsError, match=r"^hosts: host b has 2 slot\(s\), node 1 needs 3$"):
        hostlist.select(listed, 2, (3, 3))
    with pytest.raises(HostsError, match=r"^hosts: 4 nodes asked for, 3 host\(s\) listed \(a, b, c\)$"):
        hostlist.select(listed, 4, (1,) * 4)
    # parameter-server processes are not devices: slots are not checked
    assert [p.processes for p in hostlist.select(listed, 2, (5, 5), check_slots=False)] == [5, 5]
