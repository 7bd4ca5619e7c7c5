"""Promises of `fleetbench launch` that docs/guide/launch.md and docs/guide/clusters.md make, each run for real:
an interrupted launch stores nothing and leaves no process of its job on any host; only the
allow-listed environment reaches the hosts; a bad config stops a multi-process job with one line.

The multi-host cases run on an emulated two-node cluster whose nodes serve ssh (root, iproute2 and
openssh-server; under CI a missing one fails the test, naming it)."""
import json
import os
import re
import shlex
import signal
import subprocess
import uuid

import pytest
from util import PYTHON, REPO, cluster_name, emulated_nodes, env, records, wait_for

from fleetbench.emulate import sshd
from fleetbench.hosts.executors import (
    FORWARD_NAMES,
    FORWARD_PREFIXES,
    Executor,
    Job,
    forwarded_env,
)
from fleetbench.hosts.hostlist import Host
from fleetbench.machine import stamp
from fleetbench.measure import contract
from fleetbench.measure.contract import JOB_ID, SUPERVISOR
from fleetbench.store import results

PROBLEM = sshd.requirements_problem()
needs_sshd = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

# A rank that runs until it is stopped and then, from its SIGTERM handler, stores a success
# record: a benchmark finishing its last step just as the user presses ^C. Stored, it would be
# a result of a run the user cancelled; the supervisor's stop mark must keep it out.
FINISHING_RANK = """\
import signal, sys, time
from fleetbench.machine import stamp
from fleetbench.measure import contract
from fleetbench.measure.timing import log_line
from fleetbench.store import results

path = sys.argv[sys.argv.index("--results") + 1]
record = stamp.record(contract.RunIdentity(benchmark="finishing", mode="collective", method="bsp",
                                           preset="tiny", config={}, nodes=1, devices_per_node=1,
                                           world_size=1), {"throughput": 1.0, "unit": "samples/s"})

def finish(_sig, _frame):
    results.emit(path, record)
    sys.exit(0)

signal.signal(signal.SIGTERM, finish)
step = 0
while True:
    step += 1
    print(log_line(step, 10 ** 9, 1.0, 1.0, "samples/s", 0.2, 0.0), flush=True)
    time.sleep(0.2)
"""

# A rank that prints its environment, one JSON object, and ends.
ENV_RANK = """\
import json, os
print("RANK_ENV " + json.dumps(dict(os.environ)), flush=True)
"""


def _earlier_record(path):
    rec = stamp.record(contract.RunIdentity(benchmark="earlier", mode="collective", method="bsp",
                                            preset="tiny", config={}, nodes=1, devices_per_node=1,
                                            world_size=1), {"throughput": 1.0, "unit": "images/s"})
    results.append(str(path), rec)
    return path.read_bytes()


def _job_processes(token):
    """Live processes of the job on any host (the emulated nodes share this process table), in
    whatever session Paddle started them: they inherited the test's token."""
    from fleetbench.job.procs import job_pids

    return job_pids(token, variable="FAULT_TEST_TOKEN")


def _logged_progress(log_dir, count):
    """True once `count` rank logs under log_dir (any depth: a multi-host job's node*/) show a step."""
    logs = [p for p in log_dir.rglob("workerlog.*") if re.fullmatch(r"workerlog\.\d+", p.name)]
    return sum("step 1/" in p.read_text(errors="replace") for p in logs) >= count


def _processes_naming(text):
    """Live processes whose command line names `text` (a node's agent carries the job id in its
    spec, not in its environment)."""
    from fleetbench.job.procs import alive

    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read() and int(entry) != os.getpid() and alive(int(entry)):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def _interrupt(cmd, cwd, log_dir, ranks, settle=0.0, **extra):
    """Start `fleetbench launch` (cmd), SIGINT it once `ranks` ranks logged a step: (exit code,
    stderr, pids of the job alive `settle` seconds after the launcher exited: on this machine
    the supervisor waits for its job itself; a remote node's agent stops its share once its
    ssh connection closes, with a grace of its own)."""
    token = uuid.uuid4().hex
    # as from a terminal: a background job (make, nohup) would start us with SIGINT ignored
    proc = subprocess.Popen(cmd, cwd=cwd, env=env(FAULT_TEST_TOKEN=token, **extra), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert wait_for(lambda: _logged_progress(log_dir, ranks), 180), "the ranks never logged progress"
        proc.send_signal(signal.SIGINT)  # the CLI alone, as ^C to a launcher in its own session would
        _, err = proc.communicate(timeout=120)
        job = re.search(r"; job (\w+) on ", err)  # a multi-host launch names its job
        gone = lambda: not _job_processes(token) and not (job and _processes_naming(job.group(1)))
        wait_for(gone, settle)
        left = _job_processes(token) + (_processes_naming(job.group(1)) if job else [])  # before the clean-up
    finally:
        proc.kill()
        for pid in _job_processes(token):
            os.kill(pid, signal.SIGKILL)
    return proc.returncode, err, left


def _assert_interrupted(code, err, left, before, store):
    assert code == 130, err[-3000:]
    assert re.search(r"^fleetbench launch: INTERRUPTED after [\d.]+ s: interrupted by SIGINT$", err, re.M), err[-3000:]
    assert "failure recorded" not in err and "Traceback" not in err
    assert store.read_bytes() == before  # byte-identical: neither a failure nor the rank's late success
    assert left == [], "a process of the interrupted job is still running"


def test_interrupting_launch_stores_nothing_and_stops_every_rank(tmp_path):
    script, store, log_dir = tmp_path / "finishing.py", tmp_path / "runs.jsonl", tmp_path / "log"
    script.write_text(FINISHING_RANK)
    before = _earlier_record(store)
    cmd = [PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(log_dir), "--nproc_per_node", "2",
           "--timeout", "300", str(script), "--results", str(store)]
    _assert_interrupted(*_interrupt(cmd, tmp_path, log_dir, ranks=2), before, store)
    # the ranks did try to store their success when stopped, and were refused (the stop mark):
    # the byte-identical check above is one that could fail
    logs = sorted(log_dir.glob("workerlog.[01]"))
    assert len(logs) == 2, logs
    for log in logs:
        text = log.read_text(errors="replace")
        assert "FLEETBENCH_RESULT" in text and "record not stored in" in text, text[-2000:]


# ---------------------------------------------------------------------------------------------
# bad config: one line before anything starts (or, unchecked, every rank stopped and one record)

def test_a_bad_config_is_one_line_before_any_rank_starts(tmp_path):
    store = tmp_path / "runs.jsonl"
    before = _earlier_record(store)
    token = uuid.uuid4().hex
    p = subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--nproc_per_node", "2",
                        str(REPO / "collective" / "resnet50.py"), "--preset", "tiny", "--set", "nosuch=1",
                        "--results", str(store)], cwd=tmp_path, env=env(FAULT_TEST_TOKEN=token),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleetbench launch: error: "), lines
    assert "unknown config key 'nosuch'" in lines[0]
    assert p.stdout == "" and store.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["runs.jsonl"]  # no log directory: no launcher, no rank started
    assert _job_processes(token) == []


def test_an_unchecked_bad_config_stops_every_rank_with_one_report(tmp_path):
    # --no-check leaves the config to the ranks: both fail on it; the job is stopped as one, the
    # report blames one rank and shows the error once (no traceback), and one failure is stored.
    store, log_dir = tmp_path / "runs.jsonl", tmp_path / "log"
    before = _earlier_record(store)
    token = uuid.uuid4().hex
    p = subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--quiet", "--no-check", "--log_dir", str(log_dir),
                        "--nproc_per_node", "2", "--timeout", "240", str(REPO / "collective" / "resnet50.py"),
                        "--preset", "tiny", "--set", "nosuch=1", "--results", str(store)], cwd=tmp_path,
                       env=env(FAULT_TEST_TOKEN=token), capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr[-3000:]
    assert re.search(r"^fleetbench launch: FAILED after [\d.]+ s: worker rank [01] exited with code 2$", p.stderr,
                     re.M), p.stderr[-3000:]
    assert p.stderr.count("unknown config key 'nosuch'") == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert _job_processes(token) == []
    assert store.read_bytes().startswith(before)
    (new,) = records(store)[1:]
    assert new["metrics"] is None and "unknown config key 'nosuch'" in new["error"] and new["world_size"] == 2


# ---------------------------------------------------------------------------------------------
# the environment that reaches the hosts

HEAD_ENV = {"PATH": "/usr/bin", "HOME": "/root", "FOO_SECRET": "s3cret", "AWS_SECRET_ACCESS_KEY": "k",
            "LD_PRELOAD": "/tmp/x.so", "NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1", "FLAGS_check_nan_inf": "1",
            "FLEETBENCH_NODES": "9", "GLOO_SOCKET_IFNAME": "eth1", "FORWARD_ME": "yes", "PADDLE_TRAINER_ID": "3",
            JOB_ID: "outer-job", SUPERVISOR: "boot:1:2", "NCCLX": "no", "XFLAGS_y": "no"}
FORWARDED = {"NCCL_DEBUG", "NCCL_IB_DISABLE", "FLAGS_check_nan_inf", "FLEETBENCH_NODES", "GLOO_SOCKET_IFNAME"}


def test_forwarded_env_is_the_allow_list_and_the_users_names():
    assert (FORWARD_PREFIXES, FORWARD_NAMES) == (("FLEETBENCH_", "NCCL_", "FLAGS_"), ("GLOO_SOCKET_IFNAME",))
    assert forwarded_env(HEAD_ENV) == {k: HEAD_ENV[k] for k in FORWARDED}
    assert set(forwarded_env(HEAD_ENV, ("FORWARD_ME", "NOT_SET"))) == FORWARDED | {"FORWARD_ME"}


@pytest.mark.parametrize("executor", [
    Executor([Host(f"h{i}", reach=how, index=i, address=f"10.0.0.{i + 1}") for i in range(2)], forward=("FORWARD_ME",))
    for how in ("ssh", "slurm")
])
def test_what_each_host_is_sent_is_the_allow_list_plus_its_plan(executor, tmp_path):
    """The whole path from the head's environment to the spec each node's agent receives (what
    ssh or srun carries), not only the filter: nothing else of the head's environment is in it."""
    launches = executor.launches(Job("collective", "s.py", ("--results", "r.jsonl"), 2, (1, 1)), str(tmp_path),
                                 HEAD_ENV, "job1")
    assert len(launches) == 2
    for node in launches:
        agent_argv = node.cmd if executor.name == "slurm" else shlex.split(node.cmd[-1])  # ssh: one remote string
        sent = json.loads(agent_argv[-1])["env"]
        planned = {"FLEETBENCH_NODES", "FLEETBENCH_LAUNCH", "POD_IP"}  # the executor's per-node plan
        # FLEETBENCH_OMP_THREADS: the user's own OMP_NUM_THREADS, if this pytest was given one
        assert set(sent) - {"FLEETBENCH_OMP_THREADS"} == FORWARDED | {"FORWARD_ME"} | planned, sorted(sent)
        assert sent["NCCL_DEBUG"] == "INFO" and sent["FLEETBENCH_NODES"] == "2"  # the plan wins over the head's
        sent_text = node.cmd[-1]  # all that leaves the head: nothing else of its environment, under any name
        assert "s3cret" not in sent_text and "outer-job" not in sent_text and "/tmp/x.so" not in sent_text


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if PROBLEM:
        pytest.skip(PROBLEM)
    with emulated_nodes(sshd, cluster_name("fbp"), tmp_path_factory.mktemp("state")) as nodes:
        yield nodes


@needs_sshd
def test_only_the_allow_list_and_forward_env_reach_a_host_over_ssh(cluster, tmp_path):
    script, log_dir = tmp_path / "env_rank.py", tmp_path / "log"
    script.write_text(ENV_RANK)
    marks = {name: uuid.uuid4().hex for name in ("FOO_SECRET", "NOT_FORWARDED", "FLAGS_fb_probe", "FLEETBENCH_PROBE",
                                                 "FORWARD_ME")}
    p = subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--quiet", "--hosts", cluster["hosts"][0],
                        "--ssh-config", cluster["ssh_config"], "--forward-env", "FORWARD_ME", "--timeout", "120",
                        "--log_dir", str(log_dir), str(script), "--results", str(tmp_path / "runs.jsonl")],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=env(FLEETBENCH_CLUSTER_STATE_DIR=cluster["state"], NCCL_DEBUG="INFO",
                               GLOO_SOCKET_IFNAME="lo", **marks))
    assert p.returncode == 0, p.stderr[-3000:]
    (log,) = log_dir.glob("node0/workerlog.0")
    (line,) = [line for line in log.read_text().splitlines() if line.startswith("RANK_ENV ")]
    got = json.loads(line.split(" ", 1)[1])
    assert got["NCCL_DEBUG"] == "INFO" and got["GLOO_SOCKET_IFNAME"] == "lo"
    for name in ("FLAGS_fb_probe", "FLEETBENCH_PROBE", "FORWARD_ME"):
        assert got.get(name) == marks[name], name
    assert "FOO_SECRET" not in got and "NOT_FORWARDED" not in got
    # nor under another name: neither value appears anywhere in the rank's environment
    leaked = [k for k, v in got.items() if marks["FOO_SECRET"] in v or marks["NOT_FORWARDED"] in v]
    assert leaked == []


@needs_sshd
def test_interrupting_a_two_host_launch_stops_every_host_and_stores_nothing(cluster, tmp_path):
    script, store, log_dir = tmp_path / "finishing.py", tmp_path / "runs.jsonl", tmp_path / "log"
    script.write_text(FINISHING_RANK)
    before = _earlier_record(store)
    # the token is forwarded so that the nodes' processes carry it too: found on any host, any session
    cmd = [PYTHON, "-m", "fleetbench", "launch", "--quiet", "--hostfile", cluster["hostfile"], "--ssh-config",
           cluster["ssh_config"], "--forward-env", "FAULT_TEST_TOKEN", "--nnodes", "2", "--timeout", "300",
           "--log_dir", str(log_dir), str(script), "--results", str(store)]
    # The nodes' ranks store into scratch files there; the head imports a node's record only from
    # a job that ended well, so an interrupted one leaves the head's store as it was.
    # The agents stop their nodes' processes within agent.STOP_GRACE_S (2 s) and a SIGKILL; 30 s
    # is that with slack for a loaded 2-core machine.
    code, err, left = _interrupt(cmd, REPO, log_dir, ranks=2, settle=30, FLEETBENCH_CLUSTER_STATE_DIR=cluster["state"])
    assert re.search(r"; job \w+ on ", err), err[-3000:]  # so the agents were looked for by their job id too
    _assert_interrupted(code, err, left, before, store)
