"""fleetbench launch: argument lists, and real fault runs (gloo jobs whose chosen rank fails)."""
import os
import subprocess
import time
import uuid

import pytest

from fleetbench.cluster import launch
from fleetbench.measure import results
from util import PYTHON, REPO, env, records

FAULT_SCRIPT = str(REPO / "tests" / "scripts" / "fault_rank.py")


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
    cmd = launch.paddle_command(args.paddle, "/tmp/logs", args.script, args.script_args, python="py")
    assert cmd == ["py", "-m", "paddle.distributed.launch", "--gpus", "0,1,2,3", "--log_dir", "/tmp/logs",
                   launch.__file__, launch.WRAPPER_FLAG, "train.py", "--preset", "tiny"]
    assert all(isinstance(a, str) for a in cmd)  # an argument list, never a shell string


def test_equals_forms_and_own_flags():
    args = launch.parse_argv(["--devices=0-1", "--log_dir=L", "--stall=5", "--startup", "60", "--quiet", "s.py",
                              "--gpus", "0-9"])
    assert args.paddle == ["--devices", "0,1"] and args.log_dir == "L" and args.stall == 5.0 and args.quiet
    assert args.startup == 60.0
    assert args.script_args == ["--gpus", "0-9"]  # script arguments are the script's, untouched


@pytest.mark.parametrize("argv, message", [
    (["--bogus", "1", "s.py"], "unknown launcher flag --bogus"),
    (["--nproc_per_node"], "--nproc_per_node needs a value"),
    (["--timeout", "x", "s.py"], "--timeout 'x': expected a number"),
    (["--stall", "0", "s.py"], "must be > 0"),
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


def test_progress_lines_are_the_timing_log_format():
    from fleetbench.measure.timing import log_line

    assert launch.progress_step(log_line(40, 100, 2.31, 1234.5, "images/s", 0.05, 0.001)) == (40, 100)
    assert launch.progress_step('FLEETBENCH_RESULT {"a": 1}') == (None, None)
    assert launch.progress_step("I1122 tcp_utils.cc:130] connected") is None
    assert launch.progress_step("a step 3/4 inside") is None


def test_rank_identity_from_paddle_env():
    assert launch.rank_identity({"PADDLE_TRAINER_ID": "3"}) == ("worker", 3)
    assert launch.rank_identity({"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "1"}) == ("worker", 1)
    server = {"TRAINING_ROLE": "PSERVER", "POD_IP": "10.0.0.2", "PADDLE_PORT": "7000",
              "PADDLE_PSERVERS_IP_PORT_LIST": "10.0.0.1:7000,10.0.0.2:7000"}
    assert launch.rank_identity(server) == ("server", 1)


def test_child_env_drops_inherited_rank_variables():
    got = launch.child_env({"PADDLE_TRAINER_ID": "1", "POD_IP": "1.2.3.4", "PATH": "/bin", "OMP_NUM_THREADS": "2"})
    assert "PADDLE_TRAINER_ID" not in got and "POD_IP" not in got and got["PATH"] == "/bin"
    assert "OMP_NUM_THREADS" not in got  # each rank takes its share (fleetbench/__init__)
    assert got["PYTHONPATH"].split(os.pathsep)[0] == launch.REPO_ROOT


def test_launch_cli_bad_input_launches_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert launch.cli(["--nproc_per_node", "2", str(tmp_path / "missing.py")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.py: no such file" in err[0]
    assert not (tmp_path / "log").exists()


# ---------------------------------------------------------------------------------------------
# real jobs

def _earlier_record(path):
    rec = results.make_record(benchmark="earlier", mode="collective", method="mgwfbp", preset="tiny",
                              config={"x": 1}, nodes=1, devices_per_node=1, world_size=1,
                              metrics={"throughput": 1.0, "unit": "images/s"})
    results.append(str(path), rec)
    return path.read_bytes()


def _job_processes(token):
    """Live processes that inherited this test's token (the whole job, whatever its tree)."""
    return launch.job_pids(token, variable="FAULT_TEST_TOKEN")


def _run_fault(tmp_path, kind, rank, *launch_flags, timeout=120, **extra_env):
    store = tmp_path / "runs.jsonl"
    before = _earlier_record(store)
    token = uuid.uuid4().hex
    log_dir = tmp_path / "log"
    cmd = [PYTHON, "-m", "fleetbench", "launch", "--quiet", "--log_dir", str(log_dir), "--nproc_per_node", "2",
           *launch_flags, FAULT_SCRIPT, "--results", str(store)]
    started = time.monotonic()
    p = subprocess.run(cmd, cwd=tmp_path, env=env(FAULT_KIND=kind, FAULT_RANK=rank, FAULT_TEST_TOKEN=token,
                                                  **extra_env),
                       capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - started
    assert _job_processes(token) == [], "a process of the job is still running"
    data = store.read_bytes()
    assert data.startswith(before), "an earlier record was changed"
    new = records(store)[1:]
    return p, took, new


def test_rank_exiting_with_error_is_reported(tmp_path):
    p, took, new = _run_fault(tmp_path, "exit", 1, "--timeout", "90")
    assert p.returncode == 1, p.stderr
    assert "FAILED" in p.stderr and "worker rank 1 exited with code 3" in p.stderr
    assert "rank 1, role worker, node node0, exit code 3" in p.stderr
    assert "| fault_rank: rank 1 injects exit at step 3" in p.stderr  # the tail of rank 1's log
    assert took < 60
    assert len(new) == 1 and new[0]["error"].startswith("launch: worker rank 1 exited with code 3")
    assert new[0]["metrics"] is None and new[0]["world_size"] == 2 and new[0]["mode"] == "collective"


def test_rank_killed_by_sigkill_is_reported(tmp_path):
    p, took, new = _run_fault(tmp_path, "kill", 0, "--timeout", "90")
    assert p.returncode == 1, p.stderr
    assert "worker rank 0 was killed by SIGKILL" in p.stderr
    assert "| fault_rank: rank 0 injects kill at step 3" in p.stderr
    assert took < 60
    assert len(new) == 1 and "killed by SIGKILL" in new[0]["error"]


def test_hanging_rank_is_stopped_by_the_stall_watchdog(tmp_path):
    # start-up (paddle import, gloo rendezvous) has its own allowance: > 8 s on loaded cores
    stall = 5
    p, took, new = _run_fault(tmp_path, "hang", 1, "--stall", str(stall), "--startup", "60", "--timeout", "90",
                              STEPS="6")
    assert p.returncode == 1, p.stderr
    assert f"no progress line from any rank for {stall} s" in p.stderr
    assert "furthest behind: worker rank 1 (last: step 2/6" in p.stderr
    assert "| fault_rank: rank 1 injects hang at step 3" in p.stderr
    # bound: start-up + a few steps + the stall window + stopping (grace 3 s)
    assert took < 60
    assert len(new) == 1 and "stalled" in new[0]["error"]


def test_a_job_that_never_logs_progress_is_stopped_after_the_startup_allowance(tmp_path):
    # rank 0 hangs before step 1; rank 1 waits in step 1's all-reduce: neither ever logs progress
    p, took, new = _run_fault(tmp_path, "hang", 0, "--startup", "3", "--stall", "60", FAULT_STEP="0")
    assert p.returncode == 1, p.stderr
    assert "no progress line from any rank within 3 s of the start" in p.stderr
    assert took < 20 and len(new) == 1


def test_timeout_stops_a_job_that_keeps_logging(tmp_path):
    p, took, new = _run_fault(tmp_path, "none", -1, "--timeout", "6", STEPS="1000", STEP_S="0.1")
    assert p.returncode == 1, p.stderr
    assert "TIMEOUT" in p.stderr and "still running after 6 s" in p.stderr
    assert took < 20
    assert len(new) == 1 and "timeout" in new[0]["error"]


def test_resnet50_tiny_on_two_processes(tmp_path):
    store = tmp_path / "runs.jsonl"
    p = subprocess.run([PYTHON, "-m", "fleetbench", "launch", "--log_dir", str(tmp_path / "log"),
                        "--nproc_per_node", "2", "--timeout", "240", "collective/resnet50.py", "--preset", "tiny",
                        "--results", str(store)], cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "OK after" in p.stderr and "step 12/12" in p.stdout  # rank 0's log is echoed
    (rec,) = records(store)
    assert rec["error"] is None and rec["world_size"] == 2 and rec["benchmark"] == "resnet50"
    assert rec["metrics"]["throughput"] > 0


def test_launcher_failing_before_any_rank_is_reported_with_its_own_log(tmp_path):
    # `--devices` on a CPU-only Paddle fails inside Paddle's launcher, before any rank starts.
    p, took, new = _run_fault(tmp_path, "none", -1, "--devices", "0", "--timeout", "60")
    assert p.returncode == 1, p.stderr
    assert "the launcher on node0 exited with code 1" in p.stderr and "launcher.log ---" in p.stderr
    assert len(new) == 1 and new[0]["error"].startswith("launch: the launcher on node0 exited with code 1")
