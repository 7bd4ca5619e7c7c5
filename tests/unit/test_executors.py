"""The executors' command lines and per-node environments for a 2-node job, built without starting
anything (fleetbench/hosts/executors.py): what each node's launcher is told, and how."""
import dataclasses
import json
import shlex
import sys

import pytest

from fleetbench.hosts import executors as ex
from fleetbench.hosts import reach
from fleetbench.hosts.hostlist import Host
from fleetbench.measure import contract

NODES = [Host("alpha", index=0, address="10.9.0.1", env=(("GLOO_SOCKET_IFNAME", "veth0"),)),
         Host("beta", index=1, address="10.9.0.2", env=(("GLOO_SOCKET_IFNAME", "veth1"),))]


def _hosts(**how):
    return [dataclasses.replace(n, **how, netns=f"fb-node{n.index}" if how.get("reach") == "netns" else "")
            for n in NODES]
JOB = ex.Job("collective", "collective/resnet50.py", ("--preset", "tiny"), nodes=2, counts=(2, 1))
BASE = {"PATH": "/bin", "HOME": "/root", "NCCL_DEBUG": "INFO", "SECRET": "x", contract.JOB_ID: "old"}


def _flag(flags, name):
    return flags[flags.index(name) + 1]


def test_collective_node_flags_share_one_master_and_number_the_nodes():
    flags = ex.node_flags(JOB, ["10.9.0.1", "10.9.0.2"])
    assert [_flag(f, "--rank") for f in flags] == ["0", "1"]
    assert [_flag(f, "--nproc_per_node") for f in flags] == ["2", "1"]
    assert [_flag(f, "--host") for f in flags] == ["10.9.0.1", "10.9.0.2"]
    assert {_flag(f, "--nnodes") for f in flags} == {"2"}
    masters = {_flag(f, "--master") for f in flags}
    assert len(masters) == 1 and masters.pop().startswith("10.9.0.1:")


def test_ps_node_flags_spread_servers_and_trainers_and_skip_an_empty_node():
    job = ex.Job("ps", "ps/ctr_dnn.py", (), nodes=3, servers=3, workers=1, flags=("--devices", "cpu"))
    flags = ex.node_flags(job, ["a", "b", "c"])
    servers = _flag(flags[0], "--servers").split(",")
    trainers = _flag(flags[0], "--trainers").split(",")
    assert [s.split(":")[0] for s in servers] == ["a", "b", "c"] and [t.split(":")[0] for t in trainers] == ["a"]
    assert all(f is not None and f[-2:] == ["--devices", "cpu"] for f in flags)
    # one server and no trainer on a 2-node job's second node still runs; a node with neither does not
    none = ex.node_flags(ex.Job("ps", "s.py", (), nodes=2, servers=1, workers=1), ["a", "b"])
    assert none[0] is not None and none[1] is None


def test_spread_gives_the_rest_to_the_first_nodes():
    assert ex.spread(5, 2) == [3, 2] and ex.spread(1, 3) == [1, 0, 0] and ex.spread(4, 4) == [1] * 4


def test_netns_argv_enters_each_nodes_namespace_and_runs_paddles_launcher():
    launches = ex.Executor(_hosts(reach="netns")).launches(JOB, "/logs", BASE, "job1")
    assert [la.cmd[:4] for la in launches] == [["ip", "netns", "exec", "fb-node0"], ["ip", "netns", "exec", "fb-node1"]]
    for i, la in enumerate(launches):
        assert la.cmd[4:7] == [sys.executable, "-m", "paddle.distributed.launch"]
        assert _flag(la.cmd, "--log_dir") == f"/logs/node{i}" == la.log_dir
        assert la.cmd[-3:] == ["collective/resnet50.py", "--preset", "tiny"]
        assert la.env["POD_IP"] == NODES[i].address and la.env["GLOO_SOCKET_IFNAME"] == f"veth{i}"
    assert [la.name for la in launches] == ["alpha", "beta"]


def test_per_node_env_carries_the_rank_contract_of_the_whole_job():
    launches = ex.Executor(_hosts(reach="netns")).launches(JOB, "/logs", BASE, "job1")
    for la in launches:
        rc = contract.RankContract.from_env(la.env)
        assert rc.nodes == 2
        assert rc.launch == {"executor": "netns", "hosts": ["alpha", "beta"], "processes": [2, 1]}


def test_a_job_larger_than_the_nodes_given_is_refused():
    job = ex.Job("collective", "s.py", (), nodes=3)
    with pytest.raises(ex.hostlist.HostsError, match="needs 3 nodes, 2 given"):
        ex.Executor(_hosts(reach="netns")).launches(job, "/logs", BASE, "j")


def _agent_spec(cmd):
    """The spec the node agent receives: the last word of the transport's agent argv."""
    return json.loads(cmd[-1])


def test_ssh_argv_runs_the_agent_in_the_workdir_with_only_the_allow_listed_env():
    executor = ex.Executor(_hosts(reach="ssh", python="/opt/py", workdir="/srv/fb", ssh_config="/etc/fb_ssh"),
                           forward=("HOME",))
    launches = executor.launches(JOB, "/logs", BASE, "job1")
    for i, la in enumerate(launches):
        mirror, transport = la.cmd[:la.cmd.index("--")], la.cmd[la.cmd.index("--") + 1:]
        assert mirror[1:] == ["-m", "fleetbench.hosts.agent", "--mirror", f"/logs/node{i}", NODES[i].name]
        assert transport[:-2] == ["ssh", *reach.SSH_OPTIONS, "-o", "ConnectTimeout=10", "-F", "/etc/fb_ssh"]
        assert transport[-2] == NODES[i].name
        remote = shlex.split(transport[-1])
        assert remote[:4] == ["cd", "/srv/fb", "&&", "exec"] and remote[4:7] == ["/opt/py", "-m", "fleetbench.hosts.agent"]
        spec = json.loads(remote[7])
        assert spec["job"] == f"job1-node{i}" and spec["script"] == "collective/resnet50.py"
        assert spec["args"][-2:] == ["--results", spec["args"][-1]] and spec["args"][-1].endswith("/results.jsonl")
        env = spec["env"]
        assert env["NCCL_DEBUG"] == "INFO" and env["HOME"] == "/root" and env["POD_IP"] == NODES[i].address
        assert "SECRET" not in env and "PATH" not in env and env.get(contract.JOB_ID) != "old"


def test_ssh_argv_without_a_config_has_no_F():
    argv = reach.ssh_argv("h", "true")
    assert "-F" not in argv and argv[-2:] == ["h", "true"] and "ConnectTimeout=10" in argv


def test_slurm_argv_is_one_step_per_node_with_the_nodes_cpus():
    launches = ex.Executor(_hosts(reach="slurm", python="/opt/py", workdir="/srv/fb", cpus="8")).launches(
        JOB, "/l", BASE, "j")
    for node, la in zip(NODES, launches):
        step = la.cmd[la.cmd.index("--") + 1:]
        assert step[:7] == ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node.name}", "--cpus-per-task=8",
                            "--kill-on-bad-exit=1", "--chdir=/srv/fb"]
        assert step[7:10] == ["/opt/py", "-m", "fleetbench.hosts.agent"]
        assert _agent_spec(step)["flags"][_agent_spec(step)["flags"].index("--rank") + 1] == str(node.index)
    no_cpus = reach.command(dataclasses.replace(NODES[0], reach="slurm"), ["a"])
    assert not any(w.startswith(("--cpus-per-task", "--chdir")) for w in no_cpus)


def test_results_path_moves_to_the_nodes_scratch_in_every_spelling():
    assert ex._results_to_scratch(["--results", "/r.jsonl", "x"], "/s") == ["--results", "/s/results.jsonl", "x"]
    assert ex._results_to_scratch(["--results=/r.jsonl"], "/s") == ["--results=/s/results.jsonl"]
    assert ex._results_to_scratch(["x"], "/s") == ["x", "--results", "/s/results.jsonl"]


def test_one_way_to_reach_a_host_serves_launch_and_diagnose_alike():
    # the same Host and the same reach.command wrap Paddle's launcher (executors) and a probe
    # (fleetbench.diagnose.run): one spelling of ssh, srun and ip netns exec
    ssh = Host("ops@h1", reach="ssh", ssh_config="/c", workdir=None)
    argv = reach.command(ssh, ["/py", "-m", "x", "a b"])
    assert argv[-2] == "ops@h1" and argv[-1] == "exec /py -m x 'a b'" and argv[argv.index("-F") + 1] == "/c"
    assert reach.command(dataclasses.replace(ssh, workdir="/srv"), ["p"])[-1] == "cd /srv && exec p"
    assert reach.command(Host("n3", reach="netns", netns="fbx-node3"), ["p"]) == ["ip", "netns", "exec",
                                                                                  "fbx-node3", "p"]
    assert reach.command(Host("here", reach="local"), ["p", "q"]) == ["p", "q"]
    with pytest.raises(ValueError, match="reach 'rsh'"):
        Host("h", reach="rsh")


def test_an_executor_over_hosts_reached_two_ways_is_refused():
    with pytest.raises(ex.hostlist.HostsError, match="reached one way"):
        ex.Executor([NODES[0], dataclasses.replace(NODES[1], reach="slurm")])


def test_a_nodes_log_lines_reach_the_head_before_the_exit_event_written_after_them(tmp_path):
    # The wrapper writes its exit event after the script's last line; the head's supervisor reads
    # events before logs. The forwarder reads events first and sends them last, so the mirror on the
    # head never holds an exit whose last log line has not arrived yet. A rank "dies" here while
    # the forwarder reads its events: the line it wrote just before is still sent ahead of them.
    import io

    from fleetbench.hosts import agent
    log, events = tmp_path / "workerlog.1", tmp_path / ".fbrank-job-7"
    log.write_text("step 3\n")
    events.write_text('{"event": "exit", "signal": 9}\n')
    out = io.StringIO()
    fwd = agent._Forwarder(str(tmp_path), out)
    read = fwd._new_lines

    def rank_dies_while_events_are_read(name):
        lines = read(name)
        if name == events.name:
            with open(log, "a") as f:
                f.write("fault: killed at 4\n")
        return lines
    fwd._new_lines = rank_dies_while_events_are_read
    fwd.poll()
    sent = [line for line in out.getvalue().splitlines() if line.startswith(agent.LOG_MARK)]
    assert sent == [f"{agent.LOG_MARK}workerlog.1\tstep 3", f"{agent.LOG_MARK}workerlog.1\tfault: killed at 4",
                    f'{agent.LOG_MARK}.fbrank-job-7\t{{"event": "exit", "signal": 9}}']


def test_ports_told_to_the_launchers_are_never_ones_a_launcher_picks_for_itself(monkeypatch):
    # node 0's launcher picks its collective master's port from PORT_RANGE before it serves
    # --master: told a port of that range, it once picked the same one (ex.free_port's docstring)
    from fleetbench.job.paddle_launch import LAUNCHER_PORT_RANGE
    low, high = map(int, LAUNCHER_PORT_RANGE.split(":"))
    monkeypatch.delenv("PORT_RANGE", raising=False)
    for port_range in (None, "35100:64000", "10000:15000", "21000:22000"):
        ports = {ex.free_port(port_range) for _ in range(300)}
        assert all(ex.PORT_FLOOR <= p < ex.EPHEMERAL_START and not low <= p <= high for p in ports), port_range
        if port_range:
            a, b = map(int, port_range.split(":"))
            assert not any(a <= p <= b for p in ports), port_range
    # the largest free stretch: below the launchers' range, not the 32001-32767 left above it
    assert all(ex.PORT_FLOOR <= ex.free_port() < low for _ in range(100))
    monkeypatch.setenv("PORT_RANGE", "10000:19999")  # the user's own range, with fleetbench's beside it
    assert 32000 < ex.free_port() < ex.EPHEMERAL_START
    for flags in ex.node_flags(JOB, ["10.9.0.1", "10.9.0.2"]):
        assert 32000 < int(_flag(flags, "--master").rsplit(":", 1)[1]) < ex.EPHEMERAL_START
    with pytest.raises(ValueError, match="PORT_RANGE: expected LOW:HIGH"):
        ex.free_port("20000-32000")
    with pytest.raises(ValueError, match="fewer than 100 ports"):
        ex.free_port("10000:32767")
