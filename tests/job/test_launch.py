"""fleetbench launch: argument lists, checks before launching, and real fault runs (tiny gloo
jobs whose chosen rank fails, hangs or is stopped)."""
import json
import os
import re
import signal
import subprocess
import uuid

import pytest
from util import CPU_RANKS, PYTHON, REPO, env, needs_ps, records, result_line, wait_for

from fleetbench.hosts import launch
from fleetbench.job import paddle_launch, preflight, procs, rankwrap, supervisor
from fleetbench.job.messages import start_up_failure
from fleetbench.job.ranks import progress_step, read_events
from fleetbench.machine import stamp
from fleetbench.measure import contract
from fleetbench.store import results

FAULT_SCRIPT = str(REPO / "tests" / "scripts" / "fault_rank.py")
FAULT_PS = str(REPO / "tests" / "scripts" / "fault_ps.py")


# ---------------------------------------------------------------------------------------------
# argument handling (pure)

@pytest.mark.parametrize("text, expected", [
    ("0-3", "0,1,2,3"), ("0-7", "0,1,2,3,4,5,6,7"), ("0-3,6", "0,1,2,3,6"), ("5", "5"),
    ("1,3", "1,3"), ("2-2", "2"), (" 0 - 1 ,4", "0,1,4"),
])
def test_expand_devices(text, expected):
    assert launch.expand_devices(text) == expected


@pytest.mark.parametrize("text", ["3-1", "a", "0-", "", "0,,1", "0-2,1"])
def test_expand_devices_rejects(text):
    with pytest.raises(launch.LaunchError, match="--gpus"):
        launch.expand_devices(text)


def test_gpus_range_expands_in_the_command():
    args = launch.parse_argv(["--gpus", "0-3", "--timeout", "60", "train.py", "--preset", "tiny"])
    assert args.paddle == ["--gpus", "0,1,2,3"]
    assert (args.timeout, args.script, args.script_args) == (60.0, "train.py", ["--preset", "tiny"])
    cmd = paddle_launch.paddle_command(args.paddle, "/tmp/logs", args.script, args.script_args, python="py")
    assert cmd == ["py", "-m", "paddle.distributed.launch", "--gpus", "0,1,2,3", "--log_dir", "/tmp/logs",
                   paddle_launch.WRAPPER_ENTRY, "train.py", "--preset", "tiny"]
    assert all(isinstance(a, str) for a in cmd)  # an argument list, never a shell string
    # the wrapper's entry file is alone in its directory: nothing there can shadow a module
    assert os.listdir(os.path.dirname(paddle_launch.WRAPPER_ENTRY)) in (["fleetbench_rank.py"],
                                                              ["fleetbench_rank.py", "__pycache__"])


def test_equals_forms_and_own_flags():
    args = launch.parse_argv(["--devices=0-1", "--log_dir=L", "--stall=5", "--startup", "60", "--quiet", "s.py",
                              "--gpus", "0-9"])
    assert args.paddle == ["--devices", "0,1"] and args.log_dir == "L" and args.stall == 5.0 and args.quiet
    assert args.startup == 60.0 and args.check
    assert args.script_args == ["--gpus", "0-9"]  # script arguments are the script's, untouched
    assert not launch.parse_argv(["--no-check", "s.py"]).check


@pytest.mark.parametrize("argv, message", [
    (["--bogus", "1", "s.py"], "unknown launcher flag --bogus"),
    (["--nproc_per_node"], "--nproc_per_node needs a value"),
    (["--timeout", "x", "s.py"], "--timeout 'x': expected a number"),
    (["--stall", "0", "s.py"], "--stall '0': expected a number > 0"),
    (["--nproc_per_node", "2"], "missing SCRIPT"),
    (["--gpus", "3-1", "s.py"], "--gpus '3-1'"),
    (["--nproc_per_node", "x", "s.py"], "--nproc_per_node 'x': expected an integer"),
    (["--nnodes", "two", "s.py"], "--nnodes 'two'"),
])
def test_bad_command_lines(argv, message):
    with pytest.raises(launch.LaunchError, match=message):
        launch.parse_argv(argv)


def test_job_shape():
    shape = lambda *a: launch.job_shape(launch.parse_argv([*a, "s.py"]))
    assert shape("--nproc_per_node", "2") == ("collective", 1, 2, 2)
    assert shape("--gpus", "0-3") == ("collective", 1, 4, 4)
    assert shape("--ips", "a,b", "--gpus", "0,1") == ("collective", 2, 2, 4)
    assert shape("--server_num", "2", "--trainer_num", "2") == ("ps", 1, 2, 2)
    assert shape("--servers", "a:1", "--trainers", "a:2,b:3,b:4") == ("ps", 1, 3, 3)


@pytest.mark.parametrize("argv, config, expected", [
    (["--nproc_per_node", "2", "collective/resnet50.py"], {"method": "bsp"}, ("resnet50", "collective", "bsp")),
    (["--server_num", "1", "--trainer_num", "1", "parameter_server/ctr.py"], {"mode": "async"}, ("ctr", "ps", "async")),
    (["--nproc_per_node", "2", "collective/comm.py"], {"op": "all_reduce"}, ("comm", "comm", "all_reduce")),
    (["--nproc_per_node", "2", "probe.py"], None, ("probe", "collective", "unknown")),
])
def test_what_a_failure_record_says_the_run_was(argv, config, expected):
    identity = launch.identity_for(launch.parse_argv([a if not a.endswith(".py") else str(REPO / a) for a in argv]),
                                   config)
    assert (identity.benchmark, identity.mode, identity.method) == expected


def test_progress_lines_are_the_timing_log_format():
    from fleetbench.measure.timing import log_line

    assert progress_step(log_line(40, 100, 2.31, 1234.5, "images/s", 0.05, 0.001)) == (40, 100)
    assert progress_step('FLEETBENCH_RESULT {"a": 1}') == (None, None)
    assert progress_step("I1122 tcp_utils.cc:130] connected") is None
    assert progress_step("a step 3/4 inside") is None


def test_rank_identity_from_paddle_env():
    assert rankwrap.rank_identity({"PADDLE_TRAINER_ID": "3"}) == ("worker", 3)
    assert rankwrap.rank_identity({"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "1"}) == ("worker", 1)
    server = {"TRAINING_ROLE": "PSERVER", "POD_IP": "10.0.0.2", "PADDLE_PORT": "7000",
              "PADDLE_PSERVERS_IP_PORT_LIST": "10.0.0.1:7000,10.0.0.2:7000"}
    assert rankwrap.rank_identity(server) == ("server", 1)


def test_child_env_drops_inherited_rank_and_job_variables():
    got = paddle_launch.child_env({"PADDLE_TRAINER_ID": "1", "POD_IP": "1.2.3.4", "PATH": "/bin", "OMP_NUM_THREADS": "2",
                         "FLEETBENCH_JOB_ID": "outer", contract.SUPERVISOR: "x:1:2"})
    assert not {"PADDLE_TRAINER_ID", "POD_IP", "FLEETBENCH_JOB_ID", contract.SUPERVISOR} & set(got)
    assert got["PATH"] == "/bin"
    assert "OMP_NUM_THREADS" not in got  # each rank takes its share (fleetbench/__init__)
    assert got["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)


def test_the_users_own_switch_to_cpu_ranks_is_passed_on_but_an_enclosing_jobs_is_not():
    # issue 33 finding 5: PADDLE_DISTRI_BACKEND=gloo (Paddle's switch to CPU ranks on a CUDA build, the
    # tests' on GPU hosts) was dropped with the inherited rank variables, so it never reached a rank
    assert paddle_launch.child_env({"PADDLE_DISTRI_BACKEND": "gloo"})["PADDLE_DISTRI_BACKEND"] == "gloo"
    inside = {"PADDLE_DISTRI_BACKEND": "gloo", "PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "2"}
    assert "PADDLE_DISTRI_BACKEND" not in paddle_launch.child_env(inside)  # Paddle's launcher gave it that job


def test_paddle_picks_its_ports_below_the_ephemeral_range_unless_the_user_chose():
    low, high = map(int, paddle_launch.child_env({})["PORT_RANGE"].split(":"))
    assert 1024 < low < high < 32768  # Linux's default ephemeral range starts at 32768
    assert paddle_launch.child_env({"PORT_RANGE": "40000:41000"})["PORT_RANGE"] == "40000:41000"


# ---------------------------------------------------------------------------------------------
# bad input: one line, exit 2, nothing started, nothing stored

def _cli_error(capsys, argv):
    code = launch.cli(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


def test_missing_script_launches_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _cli_error(capsys, ["--nproc_per_node", "2", str(tmp_path / "missing.py")])
    assert "missing.py: no such file" in line
    assert not (tmp_path / "log").exists()


@pytest.mark.parametrize("where", ["/proc/forbidden/r.jsonl", "{tmp}", "{tmp}/file/r.jsonl"])
def test_an_unwritable_results_path_is_refused_before_launching(tmp_path, capsys, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("")
    path = where.format(tmp=tmp_path)
    line = _cli_error(capsys, ["--nproc_per_node", "2", FAULT_SCRIPT, "--results", path])
    assert line.startswith(f"fleetbench launch: error: --results {path}: ")
    assert os.listdir(tmp_path) == ["file"]  # no log directory, no probe file left behind


def test_devices_this_machine_lacks_are_refused_before_launching(tmp_path, capsys, monkeypatch):
    # `--gpus 0-7` names devices 0..7 on every build (fleetbench expands the range; Paddle itself
    # splits on commas only). An 8-GPU host has them all, so the job is made impossible everywhere
    # by showing Paddle one device only: a CPU build sees none ("no GPU"), a GPU or XPU build with
    # one or more devices sees label 0 alone (1..7 "not visible"). Either way Paddle's launcher
    # would fail later, with a traceback and a failure record of world_size 8.
    for name in ("CUDA_VISIBLE_DEVICES", "XPU_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, "0")
    monkeypatch.chdir(tmp_path)
    found = preflight.visible_devices(paddle_launch.child_env())
    expected = "this Paddle build sees no GPU" if found["type"] == "cpu" else "device(s) 1,2,3,4,5,6,7 not visible"
    store = tmp_path / "runs.jsonl"
    before = _earlier_record(store)
    line = _cli_error(capsys, ["--gpus", "0-7", FAULT_SCRIPT, "--results", str(store)])
    assert line.startswith("fleetbench launch: error: --gpus 0,1,2,3,4,5,6,7: ") and expected in line, line
    assert store.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["runs.jsonl"]


# ---------------------------------------------------------------------------------------------
# real jobs

def _earlier_record(path):
    rec = stamp.record(contract.RunIdentity(benchmark="earlier", mode="collective", method="mgwfbp",
                                            preset="tiny", config={"x": 1}, nodes=1, devices_per_node=1,
                                            world_size=1), {"throughput": 1.0, "unit": "images/s"})
    results.append(str(path), rec)
    return path.read_bytes()


def _job_processes(token):
    """Live processes that inherited this test's token (the whole job, whatever its tree)."""
    return procs.job_pids(token, variable="FAULT_TEST_TOKEN")


def _launch_cmd(tmp_path, store, *flags, script=FAULT_SCRIPT):
    return [PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(tmp_path / "log"), *flags, script,
            "--results", str(store)]


def _run_fault(tmp_path, kind, rank, *launch_flags, timeout=120, script=FAULT_SCRIPT, **extra_env):
    """Run a fault job to its end: (completed process, records it added). Tests judge how a job
    ended by the report's status (_head), not by a wall-clock bound: see _head."""
    store = tmp_path / "runs.jsonl"
    before = _earlier_record(store)
    token = uuid.uuid4().hex
    shape = () if any(f.startswith("--server_num") for f in launch_flags) else ("--nproc_per_node", "2")
    if shape:  # the collective fault tests expect gloo's behaviour: CPU ranks on any build
        extra_env = {**CPU_RANKS, **extra_env}
    p = subprocess.run(_launch_cmd(tmp_path, store, *shape, *launch_flags, script=script), cwd=tmp_path,
                       env=env(FAULT_KIND=kind, FAULT_RANK=rank, FAULT_TEST_TOKEN=token, **extra_env),
                       capture_output=True, text=True, timeout=timeout)
    assert _job_processes(token) == [], "a process of the job is still running"
    assert store.read_bytes().startswith(before), "an earlier record was changed"
    return p, records(store)[1:]


def _head(report):
    """(status, seconds, detail) of the report's first line. The status says what ended the job,
    however slow a loaded machine is: FAILED, a rank's death noticed; STALLED, the stall or
    start-up watchdog; TIMEOUT, the wall-clock limit (checked first, so any other status means
    the job ended before --timeout). The seconds are the supervisor's own clock (from the
    launcher's start, Python's start-up excluded)."""
    m = next(m for line in report.splitlines()
             for m in [re.fullmatch(r"fleetbench launch: ([A-Z]+) after ([\d.]+) s: (.*)", line)] if m)
    return m.group(1), float(m.group(2)), m.group(3)


def _logs_shown(report):
    """Rank log files a report shows (their tail, or that they are empty), sorted."""
    return sorted(m.group(1) for line in report.splitlines() if line.startswith("  --- ")
                  for m in [re.search(r"(/\S+/(?:worker|server)log\.\d+)", line)] if m)


def test_rank_exiting_with_error_is_reported(tmp_path):
    p, new = _run_fault(tmp_path, "exit", 1, "--timeout", "90")
    assert p.returncode == 1, p.stderr
    assert "FAILED" in p.stderr and "worker rank 1 exited with code 3" in p.stderr
    assert "rank 1, role worker, node node0, exit code 3" in p.stderr
    assert "| fault_rank: rank 1 injects exit at step 3" in p.stderr  # the tail of rank 1's log
    assert _head(p.stderr)[0] == "FAILED"  # noticed when it happened, not waited out by a watchdog
    assert len(new) == 1 and new[0]["error"].startswith("launch: worker rank 1 exited with code 3")
    assert new[0]["metrics"] is None and new[0]["world_size"] == 2 and new[0]["mode"] == "collective"


LATE_RANK = """\
import os, signal, sys, time
from fleetbench.measure import contract
from fleetbench.store import results
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Paddle 3.3.1's ranks outlast SIGTERM for a while
print("step 1/2 loss 1.0", flush=True)
deadline = time.monotonic() + 60  # then finish anyway: a missing mark must fail the test, not hang it
while not os.path.exists(os.environ[contract.STOPPED_FILE]) and time.monotonic() < deadline:
    time.sleep(0.05)
if os.environ.get("PADDLE_TRAINER_ID", "0") == "0":
    results.emit(sys.argv[sys.argv.index("--results") + 1], {"late": True, "error": None})
"""


def test_a_rank_finishing_while_its_failed_job_is_stopped_stores_no_success(tmp_path):
    # Seen under Paddle 3.3.1: a sweep stored a cell's timeout failure and, 0.25 s before it, the
    # success record its rank wrote during the stop. Here the rank finishes once the supervisor
    # has decided (a stall), inside the stop's grace.
    script = tmp_path / "late_rank.py"
    script.write_text(LATE_RANK)
    # --startup 60: without it the 2 s stall also bounds the start-up, and on loaded cores the job
    # was judged before the rank had even started (no workerlog.0; seen with Paddle 3.3.1)
    p, new = _run_fault(tmp_path, "none", -1, "--timeout", "90", "--stall", "2", "--startup", "60",
                        script=str(script))
    assert p.returncode == 1, p.stderr
    assert len(new) == 1 and "no progress line from any rank for 2 s" in new[0]["error"], new
    assert "not stored in" in (tmp_path / "log" / "workerlog.0").read_text()


def test_a_job_failing_in_the_rendezvous_runs_once_more_and_the_record_says_so(tmp_path):
    p, new = _run_fault(tmp_path, "rendezvous", 1, "--timeout", "90", FAULT_ONCE="1")
    assert p.returncode == 0, p.stderr
    assert "failed in Paddle's start-up before any step (worker rank 1 exited with code 1)" in p.stderr
    assert new == []  # the second attempt succeeded: no failure record
    assert {"workerlog.0", "workerlog.1"} <= set(os.listdir(tmp_path / "log" / "attempt2"))
    assert "Connection refused" in (tmp_path / "log" / "workerlog.1").read_text()  # the first attempt's log stays


def test_a_second_rendezvous_failure_is_stored_naming_both_attempts(tmp_path):
    p, new = _run_fault(tmp_path, "rendezvous", 1, "--timeout", "90")
    assert p.returncode == 1, p.stderr
    assert p.stderr.count("starting it again") == 1  # once, never a loop
    assert len(new) == 1 and new[0]["error"].startswith("launch: worker rank 1 exited with code 1")
    first = new[0]["error"].split("(second attempt; first: ", 1)[1]
    assert first.startswith("worker rank 1 exited with code 1 [evidence: it exited with code 1; its log says "
                            "rendezvous failure: RuntimeError") and "; last log line: RuntimeError" in first


def test_a_failure_before_the_first_step_that_is_not_gloo_s_is_not_retried(tmp_path):
    p, new = _run_fault(tmp_path, "exit", 1, "--timeout", "90", FAULT_STEP="0")
    assert p.returncode == 1 and "starting it again" not in p.stderr and len(new) == 1


@needs_ps
def test_a_ps_start_up_that_never_ends_is_given_up_and_the_job_runs_once_more(tmp_path):
    """Paddle 2.6.2's start-up barrier deadlock (paddle26.init_deadline) cannot be caused on demand:
    a bound no start-up can meet (init_timeout_s=0.01) makes the workers leave as they would after
    it, in a real GEO job. Both attempts fail so: one failure record naming both, nothing left."""
    store, job_id = tmp_path / "runs.jsonl", uuid.uuid4().hex
    cmd = [*_launch_cmd(tmp_path, store, "--server_num", "1", "--trainer_num", "2", "--timeout", "240",
                        script=str(REPO / "parameter_server" / "word2vec.py")),
           "--preset", "tiny", "--set", "mode=geo", "--set", "init_timeout_s=0.01"]
    p = subprocess.run(cmd, cwd=tmp_path, env=env(FLEETBENCH_DATA_CACHE=tmp_path / "cache", FLEETBENCH_TEST_JOB=job_id),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    assert p.stderr.count("starting it again") == 1 and "failed in Paddle's start-up before any step" in p.stderr
    for attempt in (tmp_path / "log", tmp_path / "log" / "attempt2"):
        said = [(attempt / f"workerlog.{i}").read_text() for i in (0, 1)]
        # The worker that left first wrote its whole dump (faulthandler exits after writing): the
        # header, then a stack. Where the dump lands in the start-up depends on scheduling (a 10 ms
        # bound fires wherever the worker is), and the other worker's dump can be cut by the
        # launcher's SIGTERM, or not yet begun: neither is asserted.
        dumps = [log.split("Timeout (0:00:00.010000)!\n", 1)[1] for log in said if "Timeout (0:00:00.010000)!\n" in log]
        assert any(re.search(r'File ".*", line \d+ in ', dump) for dump in dumps), said
    (rec,) = records(store)
    assert rec["error"].startswith("launch: worker rank") and "(second attempt; first: worker rank" in rec["error"]
    assert procs.job_pids(job_id, variable="FLEETBENCH_TEST_JOB") == []


@pytest.mark.parametrize("line, rendezvous", [
    ("RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.0.1]:27683: "
     "Connection refused", True),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms", True),
    ("  File \".../process_group.py\", in new_group: pg = core.ProcessGroupGloo.create(store, rank, size)", True),
    ("fleet pull sparse from 127.0.0.1:6000 failed: Connection refused", False),  # a PS RPC, not gloo
    ("ValueError: preset 'huge' is not defined", False),
    # the line a PS worker leaves with when its start-up barrier never released
    ("Timeout (0:05:00)!", True),  # faulthandler's dump of a PS worker whose start-up never ended
    ("Timeout (0:00:00.010000)!", True),
    ("RuntimeError: Timeout (0:05:00)!", False),
])
def test_which_log_lines_mark_a_start_up_failure(line, rendezvous):
    assert start_up_failure(line) is rendezvous


def test_rank_killed_by_sigkill_is_reported(tmp_path):
    p, new = _run_fault(tmp_path, "kill", 0, "--timeout", "90")
    assert p.returncode == 1, p.stderr
    assert "worker rank 0 was killed by SIGKILL" in p.stderr
    assert "| fault_rank: rank 0 injects kill at step 3" in p.stderr
    assert _head(p.stderr)[0] == "FAILED"  # noticed, not waited out (STALLED, TIMEOUT)
    assert len(new) == 1 and "killed by SIGKILL" in new[0]["error"]


def test_hanging_rank_is_stopped_by_the_stall_watchdog(tmp_path):
    # start-up (paddle import, gloo rendezvous) has its own allowance: > 8 s on loaded cores
    stall = 5
    p, new = _run_fault(tmp_path, "hang", 1, "--stall", str(stall), "--startup", "60", "--timeout", "90",
                        STEPS="6")
    assert p.returncode == 1, p.stderr
    assert f"no progress line from any rank for {stall} s" in p.stderr
    assert "furthest behind: worker rank 1 (last: step 2/6" in p.stderr
    assert "| fault_rank: rank 1 injects hang at step 3" in p.stderr
    assert _logs_shown(p.stderr) == [str(tmp_path / "log" / f"workerlog.{i}") for i in (0, 1)]
    # The stall watchdog, not the 90 s timeout, ended it (a wall-clock bound would say less, and
    # fail on a loaded machine); and not before the window had passed on the supervisor's clock.
    status, seconds, _ = _head(p.stderr)
    assert status == "STALLED" and seconds > stall
    assert len(new) == 1 and "stalled" in new[0]["error"]


def test_a_stopped_rank_is_named_when_the_logs_cannot_tell(tmp_path):
    # Rank 1 stops (SIGSTOP) at the start of step 3: both ranks logged step 2, rank 0 waits in
    # step 3's all-reduce. The stall (5 s) comes long before gloo's 30 s timeout.
    p, new = _run_fault(tmp_path, "stop", 1, "--stall", "5", "--startup", "60", "--timeout", "90",
                        FAULT_WHEN="before")
    assert p.returncode == 1, p.stderr
    assert "stopped (process state T): worker rank 1 (last: step 2/6" in p.stderr
    assert "rank 1, role worker, node node0, stopped (process state T)" in p.stderr
    assert _logs_shown(p.stderr) == [str(tmp_path / "log" / f"workerlog.{i}") for i in (0, 1)]
    assert _head(p.stderr)[0] == "STALLED"  # the 5 s stall, before gloo's 30 s and the 90 s timeout
    assert len(new) == 1 and "worker rank 1" in new[0]["error"]


@pytest.mark.build_neutral  # on 2.6.2 only: both builds' gloo is Paddle's one fork (job/messages.py); 36 s on 3.x
def test_a_stopped_rank_is_named_when_its_peer_dies_of_gloos_timeout_first(tmp_path):
    # The stall window (90 s) is longer than gloo's compiled-in 30 s: rank 0 gives up waiting in
    # the DataParallel all-reduce and aborts (SIGABRT, as ResNet50 does) while rank 1 is stopped.
    p, new = _run_fault(tmp_path, "stop", 1, "--stall", "90", "--timeout", "150", FAULT_WHEN="before",
                        SYNC="dp", STEPS="20", timeout=200)
    assert p.returncode == 1, p.stderr
    first = p.stderr.splitlines()[1]
    assert "FAILED" in first and first.split(": ", 2)[2].startswith("worker rank 1 is stopped"), first
    assert "worker rank 0 was killed by SIGABRT after giving up waiting for it in a collective" in first
    assert "rank 1, role worker, node node0, stopped (process state T)" in p.stderr
    assert "gloo::TimeoutException" in p.stderr  # the victim's tail is shown too
    assert _logs_shown(p.stderr) == [str(tmp_path / "log" / f"workerlog.{i}") for i in (0, 1)]
    # FAILED (first line above): gloo's 30 s timeout ended it, before the 90 s stall (STALLED)
    assert len(new) == 1 and new[0]["error"].startswith("launch: worker rank 1 is stopped")


def test_a_stopped_ps_server_is_named_not_the_workers_waiting_for_it(tmp_path):
    p, new = _run_fault(tmp_path, "stop", 1, "--server_num", "2", "--trainer_num", "2", "--stall", "5",
                        "--startup", "60", "--timeout", "90", script=FAULT_PS, FAULT_ROLE="server")
    assert p.returncode == 1, p.stderr
    assert "stopped (process state T): server rank 1" in p.stderr
    assert "rank 1, role server, node node0, stopped (process state T)" in p.stderr
    logs = [str(tmp_path / "log" / name) for name in ("serverlog.0", "serverlog.1", "workerlog.0", "workerlog.1")]
    assert _logs_shown(p.stderr) == logs
    assert _head(p.stderr)[0] == "STALLED"  # the 5 s stall, not the 90 s timeout
    assert len(new) == 1 and new[0]["mode"] == "ps"


def test_a_server_killed_before_it_logged_shows_its_log_is_empty(tmp_path):
    p, new = _run_fault(tmp_path, "kill", 0, "--server_num", "1", "--trainer_num", "1", "--timeout", "90",
                        script=FAULT_PS, FAULT_ROLE="server", FAULT_STEP=0)
    assert p.returncode == 1, p.stderr
    assert "server rank 0 was killed by SIGKILL" in p.stderr
    assert f"--- {tmp_path / 'log' / 'serverlog.0'} is empty: the rank logged nothing ---" in p.stderr
    assert len(new) == 1


# Paddle 2.6.2's launcher for --trainer_num, and the legacy one it falls back to for --worker_num
# (fleet/launch.py), which says no log directory to its ranks and stops its servers itself.
PS_LAUNCHERS = {"launcher": ("--server_num", "2", "--trainer_num", "2"),
                "legacy": ("--server_num", "2", "--worker_num", "2")}


@needs_ps
@pytest.mark.parametrize("launcher", sorted(PS_LAUNCHERS))
@pytest.mark.parametrize("role, kind, rank", [("server", "kill", 1), ("worker", "kill", 1), ("server", "stop", 0)])
def test_a_parameter_server_or_worker_that_dies_or_stops_is_named(tmp_path, launcher, role, kind, rank):
    # kill: noticed when it happens (FAILED), not waited out by the 20 s stall; stop: a stopped
    # process cannot be told from a slow one but by its state, so the stall watchdog names it
    stall = "5" if kind == "stop" else "20"
    p, new = _run_fault(tmp_path, kind, rank, *PS_LAUNCHERS[launcher], "--stall", stall, "--startup", "60",
                        "--timeout", "120", script=FAULT_PS, FAULT_ROLE=role, FAULT_STEP="4", STEPS="200")
    assert p.returncode == 1, p.stderr
    status, _, detail = _head(p.stderr)
    if kind == "kill":
        assert status == "FAILED" and detail.startswith(f"{role} rank {rank} was killed by SIGKILL"), p.stderr
        assert f"rank {rank}, role {role}, node node0, signal SIGKILL" in p.stderr
    else:
        assert status == "STALLED" and f"stopped (process state T): {role} rank {rank}" in detail, p.stderr
        assert f"rank {rank}, role {role}, node node0, stopped (process state T)" in p.stderr
    assert f"| fault_ps: {role} {rank} injects {kind} at 4" in p.stderr  # its log tail
    assert not list(tmp_path.glob(".fbrank-*")), "rank events left in the working directory"
    assert len(new) == 1 and new[0]["mode"] == "ps" and f"{role} rank {rank}" in new[0]["error"]


@needs_ps
def test_a_legacy_launcher_ps_job_that_ends_well_is_a_success(tmp_path):
    # the legacy launcher SIGTERMs servers still up once its workers exit: not a failure
    p, new = _run_fault(tmp_path, "none", -1, *PS_LAUNCHERS["legacy"], "--timeout", "120", script=FAULT_PS)
    assert p.returncode == 0, p.stderr
    assert _head(p.stderr)[0] == "OK" and new == []


def test_a_killed_rank_wrapper_is_reported_without_an_exit_status(tmp_path):
    store, token = tmp_path / "runs.jsonl", uuid.uuid4().hex
    proc = subprocess.Popen(_launch_cmd(tmp_path, store, "--nproc_per_node", "2", "--timeout", "90"), cwd=tmp_path,
                            env=env(STEPS="1000", STEP_S="0.1", FAULT_TEST_TOKEN=token),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wrapper = _wait_for_rank(tmp_path / "log", rank=1)
        os.kill(wrapper["pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert "worker rank 1 disappeared: its wrapper was killed" in err, err
    assert "rank 1, role worker, node node0, no exit status (its wrapper was killed)" in err
    assert "still running" not in err
    assert _job_processes(token) == []


def _wait_for_rank(log_dir, rank, timeout=60):
    """The start event of a rank's wrapper, once the rank has logged a progress line."""
    found = {}

    def ready():
        for path in log_dir.glob(".fbrank-*"):
            events, _ = read_events(path, 0)  # the wrapper may not have written its first line yet
            start = events[0] if events else None
            if start and start["rank"] == rank and "step 1/" in open(start["log"]).read():
                found.update(start)
        return bool(found)
    assert wait_for(ready, timeout), "the rank never logged progress"
    return found


def test_kill_9_of_the_launcher_stops_its_whole_job(tmp_path):
    # The job would log for days, so its end is the wrappers' doing (their "orphaned" event says
    # so), not a finish that came in time. The wait is a promise with slack: the wrappers look for
    # their supervisor every WATCH_S and SIGKILL ORPHAN_GRACE_S after SIGTERM (about 3 s in all);
    # 60 s holds on a loaded 2-core machine.
    store, token = tmp_path / "runs.jsonl", uuid.uuid4().hex
    before = _earlier_record(store)
    proc = subprocess.Popen(_launch_cmd(tmp_path, store, "--nproc_per_node", "2"), cwd=tmp_path,
                            env=env(STEPS="10000000", STEP_S="0.1", FAULT_TEST_TOKEN=token),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_rank(tmp_path / "log", rank=0)
        assert len(_job_processes(token)) >= 4  # launcher, two wrappers, two ranks
        proc.kill()
        proc.wait()
        bound = rankwrap.WATCH_S + rankwrap.ORPHAN_GRACE_S + 55
        assert wait_for(lambda: _job_processes(token) == [], bound), _job_processes(token)
    finally:
        for pid in _job_processes(token):
            os.kill(pid, signal.SIGKILL)
    events = [json.loads(line) for path in (tmp_path / "log").glob(".fbrank-*")
              for line in path.read_text().splitlines()]
    assert any(e["event"] == "orphaned" for e in events), events
    assert store.read_bytes() == before  # nothing stored by a job nobody supervises


def test_timeout_stops_a_job_that_keeps_logging(tmp_path):
    # The job would log for days: only the timeout can end it. Promise: not before 6 s on the
    # supervisor's clock, and within it plus the stop (SIGTERM, SIGKILL after STOP_GRACE_S, up to
    # 5 s for the kill) plus 30 s of slack for a loaded 2-core machine (0.2 s polls; here ~7 s).
    p, new = _run_fault(tmp_path, "none", -1, "--timeout", "6", STEPS="10000000", STEP_S="0.1")
    assert p.returncode == 1, p.stderr
    status, seconds, detail = _head(p.stderr)
    assert status == "TIMEOUT" and detail.startswith("timeout: still running after 6 s"), p.stderr
    assert 6 < seconds < 6 + supervisor.STOP_GRACE_S + 5 + 30
    assert len(new) == 1 and "timeout" in new[0]["error"]


def test_a_job_that_never_logs_progress_is_stopped_after_the_startup_allowance(tmp_path):
    # rank 0 hangs before step 1; rank 1 waits in step 1's all-reduce: neither ever logs progress
    p, new = _run_fault(tmp_path, "hang", 0, "--startup", "3", "--stall", "60", FAULT_STEP="0")
    assert p.returncode == 1, p.stderr
    assert "no progress line from any rank within 3 s of the start" in p.stderr
    # STALLED: the start-up allowance ended it, before gloo's 30 s made rank 1 fail (FAILED)
    status, seconds, _ = _head(p.stderr)
    assert status == "STALLED" and seconds > 3 and len(new) == 1


# ResNet18 (a 2-rank job: 6.7 CPU s against ResNet50's 13.7): the launch is tested, not the model;
# ResNet50 runs through `fleetbench launch` in test_breakdown's trace test and test_explain's real records
@pytest.mark.build_neutral  # on 2.6.2 only: 3.x's jobs through the launcher are test_breakdown's
def test_a_tiny_job_on_two_processes_echoes_rank_0_and_stores_one_record(tmp_path):
    store = tmp_path / "runs.jsonl"
    p = subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--log_dir", str(tmp_path / "log"),
                        "--nproc_per_node", "2", "--timeout", "240", "collective/resnet18.py", "--preset", "tiny",
                        "--set", "steps=5", "--set", "warmup_steps=1",  # the launch is tested, not the steps
                        "--results", str(store)], cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "OK after" in p.stderr and "step 5/5" in p.stdout  # rank 0's log is echoed
    (rec,) = records(store)
    assert rec["error"] is None and rec["world_size"] == 2 and rec["benchmark"] == "resnet18"
    assert rec["metrics"]["throughput"] > 0
    # one summary line, the launcher's, from the record found by the id in the job's logs (a
    # supervised rank 0 leaves it to the launcher: its echoed log has none)
    line = result_line(p.stdout, rec, store)
    assert line.startswith("fleetbench result: resnet18 tiny 1x2 mgwfbp | ") and p.stdout.rstrip().endswith(line)


def test_launcher_failing_before_any_rank_is_reported_with_its_own_log(tmp_path):
    # A log level Paddle's launcher does not know fails inside it, before any rank starts. Given as
    # --log_level it is refused before launching (tests/unit/test_bad_input.py); Paddle also reads
    # it from the environment, which fleetbench passes on as it is.
    p, new = _run_fault(tmp_path, "none", -1, "--timeout", "60", PADDLE_LOG_LEVEL="BOGUS")
    assert p.returncode == 1, p.stderr
    assert "the launcher on node0 exited with code 1" in p.stderr and "launcher.log ---" in p.stderr
    assert len(new) == 1 and new[0]["error"].startswith("launch: the launcher on node0 exited with code 1")
