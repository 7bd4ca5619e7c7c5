"""The PS driver's pure parts: sharding, config checks, roles and threads from the environment,
pipe counters, the synthetic-data cache, file names, the scratch directory (no Paddle job is
started here)."""
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from util import PYTHON, REPO, env, wait_for

from datasets import criteo
from fleetbench.job import procs
from fleetbench.job.messages import start_up_failure
from fleetbench.measure import config
from fleetbench.train import ps
from fleetbench.train.ps import data, paddle26, roles, scratch


def test_shards_are_disjoint_and_cover_every_file():
    files = [f"part-{i:05d}" for i in range(7)]
    for workers in (1, 2, 3, 7, 9):
        shares = [data.shard(files, w, workers) for w in range(workers)]
        union = [f for share in shares for f in share]
        assert sorted(union) == files  # union is the data set ...
        assert len(union) == len(set(union))  # ... and no file is read twice
        sizes = [len(s) for s in shares]
        assert max(sizes) - min(sizes) <= 1  # balanced by file count


def _build(*sets):
    cfg = ps.PSConfig()
    for item in sets:
        key, _, value = item.partition("=")
        config.assign(cfg, key, value)
    cfg.validate()
    return cfg


def test_config_refuses_sync_with_the_reason_and_bad_values_by_name():
    with pytest.raises(config.ConfigError) as err:
        _build("mode=sync")
    assert "'mode' is 'sync'" in str(err.value) and "SendBarrierOp" in str(err.value)
    for item, key in [("mode=bsp", "'mode'"), ("dataset=Foo", "'dataset'"), ("passes=0", "'passes'"),
                      ("steps=100", "'steps'"), ("warmup_steps=-1", "'warmup_steps'"), ("data.num_workers=0", "'data.num_workers'"),
                      ("k_steps=0", "'k_steps'"), ("data.path=/no/such/dir", "'data.path'"),
                      ("init_timeout_s=0", "'init_timeout_s'"), ("init_timeout_s=-5", "'init_timeout_s'"),
                      ("init_timeout_s=soon", "'init_timeout_s'")]:
        with pytest.raises(config.ConfigError) as err:
            _build(item)
        assert key in str(err.value) and "\n" not in str(err.value)
    assert _build("mode=geo", "k_steps=10", "dataset=QueueDataset").mode == "geo"


def test_a_stuck_start_up_is_given_up_before_a_sweep_s_start_up_watchdog_stops_the_job():
    # were the watchdog first, the job would end "stalled" and never get its second attempt
    from fleetbench.sweep import sweepfile
    watchdog = sweepfile.DEFAULTS["startup"] or sweepfile.DEFAULTS["stall"]
    assert ps.PSConfig().init_timeout_s + 60 <= watchdog  # 60 s: import, fleet.init, programs, on a busy host


def test_init_deadline_leaves_with_every_thread_s_stack(tmp_path):
    """paddle26.init_deadline in a process whose block never ends: exit 1, the faulthandler dump
    headed by the line fleetbench.job.messages (family "PS start-up deadline") reads, naming the function it waited in."""
    code = ("import sys\nfrom fleetbench.train.ps import paddle26\n"
            "def waiting_for_the_barrier():\n    sys.stdin.read()\n"
            "with paddle26.init_deadline(0.5):\n    waiting_for_the_barrier()\n")
    proc = subprocess.Popen([PYTHON, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env(), cwd=REPO)
    try:
        proc.wait(timeout=60)  # stdin stays open (communicate would close it): only the deadline ends the wait
    finally:
        proc.kill()
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdin.close()
    assert proc.returncode == 1 and out.startswith("Timeout (0:00:00.500000)!\n"), (out, err)
    assert start_up_failure(out.splitlines()[0]) and "in waiting_for_the_barrier" in out


def test_init_deadline_is_cancelled_when_the_block_ends():
    code = ("import time\nfrom fleetbench.train.ps import paddle26\n"
            "with paddle26.init_deadline(2):\n    pass\ntime.sleep(3)\nprint('went on')\n")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env(), cwd=REPO, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "went on\n", proc


def test_presets_resolve():
    from parameter_server import (  # a namespace package: the scripts import without paddle
        ctr,
        word2vec,
    )
    tiny = config.build("ctr", ctr.CTRConfig, "tiny")
    assert tiny.batch_size == 32 and tiny.data.num_workers == 1 and tiny.mode == "async"
    full = config.build("ctr", ctr.CTRConfig, "full")
    assert (full.buckets, full.embedding_dim, full.fc_sizes, full.batch_size) == (1000001, 9, "400,400,400", 512)
    w2v = config.build("word2vec", word2vec.Word2VecConfig, "full")
    assert (w2v.embedding_dim, w2v.window, w2v.neg, w2v.sample, w2v.min_count) == (300, 5, 5, 0.001, 5)
    assert config.build("word2vec", word2vec.Word2VecConfig, "tiny").embedding_dim == 16


def test_role_from_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("PADDLE_", "TRAINING_ROLE", "POD_IP", "FLEETBENCH_NODES")):
            monkeypatch.delenv(key)
    with pytest.raises(config.ConfigError, match="Paddle's launcher"):
        roles.role_from_env()
    monkeypatch.setenv("TRAINING_ROLE", "TRAINER")
    monkeypatch.setenv("PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:1,10.0.0.2:2")
    monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:3,10.0.0.1:4,10.0.0.2:5")
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "3")
    monkeypatch.setenv("POD_IP", "10.0.0.1")
    role = roles.role_from_env()
    assert role.role == "worker" and role.workers == 3 and role.nodes == 2
    assert role.local_workers == 2 and len(role.servers) == 2
    where = role.placement(1)
    assert (where.rank, where.world_size, where.nodes, where.devices_per_node) == (1, 3, 2, 2)
    assert where.runtime == {"servers": 2, "workers": 3}
    # placed where no endpoint is (the launcher took this host's name, 127.0.1.1 on Debian, while the
    # endpoints say 127.0.0.1): one line naming both and the flag, not Paddle's "... is not in list"
    monkeypatch.setenv("POD_IP", "127.0.1.1")
    with pytest.raises(config.ConfigError, match=r"at 127\.0\.1\.1 .*\(10\.0\.0\.1, 10\.0\.0\.2\).*--host"):
        roles.role_from_env()


def test_threads_split_cores_between_local_workers_and_dataset_threads(monkeypatch):
    monkeypatch.setattr(roles.fleetbench, "threads_info", lambda: {"omp_num_threads": 1, "source": "fleetbench"})
    monkeypatch.setattr(roles.fleetbench, "usable_cores", lambda: 8)
    cfg = _build("data.num_workers=2")
    worker = roles.Role(role="worker", servers=[], workers=2, nodes=1, local_workers=2)
    roles.set_threads(cfg, worker)
    assert os.environ["OMP_NUM_THREADS"] == "2"
    roles.set_threads(cfg, roles.Role(role="server", servers=[], workers=2, nodes=1, local_workers=2))
    assert os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.setattr(roles.fleetbench, "threads_info", lambda: {"omp_num_threads": 3, "source": "user"})
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    roles.set_threads(cfg, worker)
    assert os.environ["OMP_NUM_THREADS"] == "3"  # the user's choice stands


def test_quiet_environment_turns_gloo_on_for_the_legacy_launcher(monkeypatch):
    monkeypatch.setenv("PADDLE_WITH_GLOO", "0")
    monkeypatch.setenv("PADDLE_GLOO_HTTP_ENDPOINT", "127.0.0.1:1234")
    monkeypatch.delenv("GLOG_minloglevel", raising=False)
    paddle26.quiet_environment()
    assert os.environ["PADDLE_WITH_GLOO"] == "1" and os.environ["GLOG_minloglevel"] == "1"


def test_pipe_counts_add_up_across_processes(tmp_path):
    path = str(tmp_path / "counts.jsonl")
    threads = [threading.Thread(target=criteo.append_counts, args=(path, {"valid": 3, "invalid": 1}))
               for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert data.read_pipe_counts(path) == {"valid": 60, "invalid": 20}
    assert data.read_pipe_counts(str(tmp_path / "none")) == {}


def test_pipe_command_runs_the_module_with_the_repo_importable(tmp_path):
    command = ps.pipe_command("datasets.criteo", "pipe", "--buckets", 11)
    line = "\t".join(["1"] + [""] * 13 + [""] * 26) + "\n"
    out = subprocess.run(command, shell=True, input=line, capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": os.environ["PATH"]})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["13", "0"] and out.stdout.split()[-2:] == ["1", "1"]


def test_synthetic_dir_is_made_once(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETBENCH_DATA_CACHE", str(tmp_path))
    calls = []

    def make(out):
        calls.append(out)
        (out / "part-00000").write_text("x\n")

    first = ps.synthetic_dir("demo", {"rows": 1}, make)
    again = ps.synthetic_dir("demo", {"rows": 1}, make)
    other = ps.synthetic_dir("demo", {"rows": 2}, make)
    assert first == again != other and len(calls) == 2
    assert (first / "part-00000").read_text() == "x\n"
    assert json.loads((first / ".params.json").read_text()) == {"rows": 1}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".demo-") and p.is_dir()]  # no leftovers


def test_a_failed_generation_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETBENCH_DATA_CACHE", str(tmp_path))

    def broken(out):
        (out / "half").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError):
        ps.synthetic_dir("demo", {"rows": 3}, broken)
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]


UNSAFE_NAME = "part-$(touch PWNED)"


def test_a_file_name_the_dataset_shell_would_run_is_refused(tmp_path):
    """Paddle's dataset opens each file as `( PIPE ) < "FILE"` through a shell, where $(...) runs."""
    good = tmp_path / "part-00000"
    bad = tmp_path / UNSAFE_NAME
    with pytest.raises(ValueError) as err:
        data.check_names([good, bad])
    assert UNSAFE_NAME in str(err.value) and "'$'" in str(err.value) and "\n" not in str(err.value)
    for name in ('a"b', "a`b", "a\\b"):
        with pytest.raises(ValueError):
            data.check_names([tmp_path / name])
    assert data.check_names(["rel/part 1", good]) == [(tmp_path.cwd() / "rel/part 1"), good]  # absolute


@pytest.mark.job
def test_the_script_refuses_such_a_file_before_launch_and_runs_nothing(tmp_path):
    folder = tmp_path / "criteo"
    criteo.generate(folder, rows=20, files=1, seed=1)
    (folder / "part-00000").rename(folder / UNSAFE_NAME)
    for extra in (["--check"], []):  # `fleetbench launch` runs --check first; a direct run too
        done = subprocess.run([PYTHON, str(REPO / "parameter_server" / "ctr.py"), "--preset", "tiny", "--set",
                               f"data.path={folder}", *extra], cwd=tmp_path, env=env(), capture_output=True,
                              text=True, timeout=60)
        errors = [line for line in done.stderr.splitlines() if "error" in line]
        assert done.returncode == 2 and len(errors) == 1 and UNSAFE_NAME in errors[0], done.stderr
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.job
def test_empty_data_directory_is_refused_by_check(tmp_path):
    (tmp_path / "empty").mkdir()
    done = subprocess.run([PYTHON, str(REPO / "parameter_server" / "ctr.py"), "--preset", "tiny", "--check",
                           "--set", f"data.path={tmp_path / 'empty'}"], env=env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        f"ctr: error: {tmp_path / 'empty'}: directory holds no data files")


REAPED_CHILD = """
import sys, time
from fleetbench.train.ps import scratch
box = scratch.for_process()
(box / "counts.jsonl").write_text("x")
box.subdir("table")
print(box.path, box._reaper.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_scratch_is_removed_when_its_process_is_killed(tmp_path, how):
    """No `finally` runs in a killed process: the reaper removes the directory anyway, also when
    the whole process group is killed. Judged once the reaper has ended (it exits right after its
    `rm`), not by a deadline: how soon that is depends on the machine's load, not on the code."""
    child = subprocess.Popen([PYTHON, "-c", REAPED_CHILD], env=env(TMPDIR=tmp_path, PYTHONPATH=REPO),
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    path, reaper = child.stdout.readline().rstrip("\n").rsplit(" ", 1)
    reaper = procs.token(int(reaper))  # alive while the child is: the child holds its pipe
    assert path.startswith(str(tmp_path / scratch.PREFIX)) and os.path.isdir(path) and reaper
    os.killpg(child.pid, how)
    child.wait(timeout=60)
    # the bound only keeps a broken reaper (one that never sees end-of-file) from hanging the suite
    assert wait_for(lambda: not procs.token_alive(reaper), 60), f"the reaper of {path} never ended"
    assert list(tmp_path.iterdir()) == []


def test_scratch_close_removes_it_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp_path))
    box = scratch.Scratch()
    (box / "f").write_text("x")
    box.close()
    assert list(tmp_path.iterdir()) == [] and box._reaper.returncode == 0


# Two processes of Paddle's own gloo (core.Gloo over a file-system store, as fleet's role maker
# builds it), each gathering through ps.gloo.Gloo: what worker 0 gives must come back bit for bit.
GLOO_PAIR = r"""
import json, math, sys
from paddle.base import core
from fleetbench.train.ps.gloo import Gloo
rank, store = int(sys.argv[1]), sys.argv[2]
comm = core.Gloo()
comm.set_rank(rank); comm.set_size(2); comm.set_prefix("t"); comm.set_iface("lo")
comm.set_timeout_seconds(60, 60); comm.set_hdfs_store(store, "", ""); comm.init()

class Util:  # fleet.util's two calls, on this communicator
    def all_reduce(self, values, mode, world):
        return comm.all_reduce(values, mode)
    def barrier(self, world):
        comm.barrier()

gloo = Gloo(rank, 2, Util())
mine = [1764421234567.891, 8.2472011234567, 1.0 + 2.0 ** -40, -0.0, float("nan")] if rank == 0 else [3.0] * 5
raw = comm.all_reduce([1764421234567.891] if rank == 0 else [0.0], "sum")  # Paddle's own, for contrast
print(json.dumps({"rows": [[repr(v) for v in row] for row in gloo.gather(mine)],
                  "sum": gloo.sum([2.0 ** -30 + rank]), "max": gloo.max([rank + 0.5, -rank]), "raw": raw}))
"""


def test_worker_collectives_keep_every_bit_of_a_float64(tmp_path):
    script = tmp_path / "pair.py"
    script.write_text(GLOO_PAIR)
    procs_ = [subprocess.Popen([PYTHON, str(script), str(rank), str(tmp_path / "store")], cwd=REPO,
                               env=env(GLOG_minloglevel="2"), stdout=subprocess.PIPE, text=True)
              for rank in (0, 1)]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs_]
    assert all(p.returncode == 0 for p in procs_)
    for out in outs:
        # Paddle's float binding rounds to float32 (why Gloo gathers integers): 36 s off a clock in ms
        assert out["raw"][0] != 1764421234567.891
        assert out["rows"] == [["1764421234567.891", "8.2472011234567", repr(1.0 + 2.0 ** -40), "-0.0", "nan"],
                               ["3.0"] * 5]
        assert out["sum"] == [2 * 2.0 ** -30 + 1] and out["max"] == [1.5, 0.0]


class _Job:
    def __init__(self, index, first):
        self.index, self.first = index, first
        self.gloo = self

    def gather(self, values):  # worker 0's row is all start_up_problem reads
        return [self.first if self.index else values, [0.0] * len(values)]


def test_a_worker_whose_parameters_came_back_unlike_worker_0_pushed_them_is_a_start_up_failure():
    from fleetbench.train.ps import driver
    names, pushed = ["fc_0.b_0", "fc_0.w_0", "fc_1.w_0"], [0.0, 0.0, 3.25, 1101.5, -0.5, 449.5]
    assert driver.start_up_problem(_Job(0, None), names, pushed, list(pushed)) is None
    assert driver.start_up_problem(_Job(1, pushed), names, [0.0] * 6, list(pushed)) is None  # its own are not compared
    problem = driver.start_up_problem(_Job(1, pushed), names, [9.0] * 6, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert problem == ("PS start-up: parameter fc_0.w_0 (and 1 more) is not what worker 0 pushed "
                       "(sum 3.25, sum of squares 1101.5; this worker holds 0, 0)")
    # as the worker logs it, the launcher reads a start-up failure (run it again), not a cause
    assert start_up_failure(f"error: worker 1: {problem}")


def test_every_role_but_server_0_waits_for_the_gloo_http_store_before_fleet_init():
    """Server 0 starts the store; the others would otherwise find it down in fleet.init and sleep
    3 s (Paddle's wait_server_ready); nothing to wait for without the HTTP rendezvous."""
    servers = ["10.0.0.1:6001", "10.0.0.2:6001"]
    env = {"PADDLE_GLOO_RENDEZVOUS": "3", "PADDLE_GLOO_HTTP_ENDPOINT": "10.0.0.1:6003",
           "PADDLE_WITH_GLOO": "1", "POD_IP": "10.0.0.1", "PADDLE_PORT": "6001"}
    wait = paddle26.rendezvous_to_wait_for
    assert wait("server", servers, env) is None
    assert wait("server", servers, {**env, "POD_IP": "10.0.0.2"}) == "10.0.0.1:6003"
    assert wait("worker", servers, {**env, "PADDLE_PORT": "6002"}) == "10.0.0.1:6003"
    assert wait("worker", servers, {**env, "PADDLE_GLOO_RENDEZVOUS": "2"}) is None  # a file store
    assert wait("worker", servers, {**env, "PADDLE_WITH_GLOO": "0"}) is None
    assert wait("worker", servers, {k: v for k, v in env.items() if k != "PADDLE_GLOO_HTTP_ENDPOINT"}) is None
