"""Real parameter-server jobs on tiny presets, under both of Paddle's launchers.

Each job must end by itself (servers told to stop) with exit 0, leave no process behind (none
carrying the job's id, in any session), and write one record. Together they cover: CTR and Word2Vec x async and GEO x 1 server/1 worker and 2/2,
`--server_num` alone, the legacy launcher (`--worker_num`), explicit endpoints for both launchers,
learning (AUC), sharding, skipped and strict invalid lines, and the refused sync mode.
"""
import fcntl
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
import util
from util import PYTHON, REPO, env, process_stacks, records, start_up_failed, wait_for, worker_log_tails

from datasets import criteo, word2vec
from fleetbench.job import procs
from fleetbench.job.paddle_launch import LAUNCHER_PORT_RANGE
from fleetbench.job.procs import job_pids
from fleetbench.machine import speed
from fleetbench.measure import metrics
from fleetbench.train.ps import scratch
from fleetbench.train.ps.marks import PARTS as PS_PARTS

# Paddle 3.1+ has no parameter server: `make test` runs this file on 3.x too, where it skips, saying why.
pytestmark = util.NEEDS_PS


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Synthetic data made once for the module (the scripts cache it by parameters)."""
    return tmp_path_factory.mktemp("data-cache")


# Two tests are about explicit endpoints (`--servers/--workers`, `--servers/--trainers`), so their
# ports must be named before the launch. They come from above Paddle's PORT_RANGE (util.QUIET_ENV:
# 20000:32000, where launchers of concurrent jobs probe for their own ports) and below Linux's
# ephemeral range (where any outgoing connection can take a port): no launcher and no kernel hands
# these out. Concurrent test runs take them under a byte-range lock per port (fcntl, released by
# the kernel when the holder dies), held for the whole test.
EXPLICIT_PORTS = range(int(LAUNCHER_PORT_RANGE.split(":")[1]) + 1,
                       int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]))
PORT_LOCK = os.path.join("/run" if os.access("/run", os.W_OK) else tempfile.gettempdir(), "fleetbench-test-ports.lock")


@pytest.fixture
def reserve_ports():
    """`take(n)`: n ports of EXPLICIT_PORTS that no concurrent run holds and nothing listens on,
    kept until the test ends. POSIX locks belong to the process: one fixture at a time per process
    (pytest runs tests one by one), and `held` keeps it from taking a port twice."""
    assert len(EXPLICIT_PORTS) >= 5, (f"no room for fixed ports between PORT_RANGE's end and the ephemeral "
                                      f"range ({EXPLICIT_PORTS}): see /proc/sys/net/ipv4/ip_local_port_range")
    held = []
    with open(PORT_LOCK, "a") as lock:
        def take(n):
            start = random.randrange(len(EXPLICIT_PORTS))
            for i in range(len(EXPLICIT_PORTS)):
                port = EXPLICIT_PORTS[(start + i) % len(EXPLICIT_PORTS)]
                if port not in held and _lock_port(lock, port):
                    held.append(port)
                    if len(held) == n:
                        return list(held)
            pytest.fail(f"fewer than {n} free ports in {EXPLICIT_PORTS}")
        yield take


def _lock_port(lock, port) -> bool:
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
    except OSError:
        return False  # another run holds it
    with socket.socket() as probe:  # and nothing else (a server of an unrelated program) uses it now
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            fcntl.lockf(lock, fcntl.LOCK_UN, 1, port)
            return False


def kill_job(job_id):
    """SIGKILL every process carrying the job's id, again until none is left (one may fork meanwhile)."""
    def kill_all() -> bool:
        pids = job_pids(job_id, variable="FLEETBENCH_TEST_JOB")
        procs.send(pids, signal.SIGKILL)
        return not pids
    wait_for(kill_all, 10)


def _command_line(pid) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace")[:200]


def _read(path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""  # the process is gone


# Who starts the job: Paddle's launcher (fleetrun), or `fleetbench launch` supervising it (no
# --check: the tests here are about the job, and the check's Paddle import would add seconds).
LAUNCH = {"paddle": [PYTHON, "-m", "paddle.distributed.launch"],
          "fleetbench": [PYTHON, "-m", "fleetbench", "launch", "--quiet", "--no-check"]}
FAILED = "failed"  # `expect`: any non-zero exit (whose code is the launcher's, see the strict test)


def job(tmp_path, cache, launcher, script, *sets, timeout=240, expect=0, extra_env=None, via="paddle", script_args=()):
    """Run `fleetrun LAUNCHER SCRIPT --preset tiny --set ...` (`via` LAUNCH); return (output,
    records, logs). A job that failed starting up (util.start_up_failed: gloo's handshake, or
    Paddle 2.6.2's start-up barrier deadlock, bounded here at 60 s) runs once more, as `fleetbench
    launch` runs it, its first logs kept as log.attempt1 and the output saying so.

    Every process of the job carries FLEETBENCH_TEST_JOB=<id> in its environment: Paddle's new
    launcher starts each rank in a session of its own, so the launcher's process group is not the
    job; the processes carrying the id are, whatever their session."""
    # the tiny jobs start in seconds: a start-up barrier that never released is given up at 60 s
    sets = ("init_timeout_s=60", *sets)
    sets = (*sets, *script_args)  # --set values, then the script's own flags (each one --flag=VALUE)
    out, code, log_dir = _job_once(tmp_path, cache, launcher, script, sets, timeout, extra_env, via)
    if code != 0 and expect == 0 and start_up_failed(log_dir):
        kept = log_dir.rename(tmp_path / "log.attempt1")
        out2, code, log_dir = _job_once(tmp_path, cache, launcher, script, sets, timeout, extra_env, via)
        out = f"{out}\ntest_ps.job: the job failed starting up; ran once more (logs of the first: {kept})\n{out2}"
    logs = {p.name: p.read_text(errors="replace") for p in sorted(log_dir.glob("*log.*"))}
    detail = out[-2000:] + "".join(f"\n--- {k}\n{v[-2500:]}" for k, v in logs.items())
    assert code != 0 if expect == FAILED else code == expect, detail
    # nothing left in the job's working directory (Paddle writes <id>_train_desc.prototxt on
    # every train_from_dataset, and http.log when gloo's HTTP rendezvous server is imported)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".prototxt" or p.name == "http.log") == []
    return out, records(tmp_path / "runs.jsonl"), logs


def _job_once(tmp_path, cache, launcher, script, sets, timeout, extra_env, via):
    """One launch of the job, to its end: (output, exit code, log directory). Fails the test when
    the job hangs (with every process's stack) or leaves a process running."""
    log_dir, store, job_id = tmp_path / "log", tmp_path / "runs.jsonl", uuid.uuid4().hex
    args = [a for kv in sets for a in ((kv,) if kv.startswith("--") else ("--set", kv))]
    cmd = [*LAUNCH[via], "--log_dir", str(log_dir), *launcher,
           str(REPO / "parameter_server" / script), "--preset", "tiny", *args, "--results", str(store)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env(FLEETBENCH_DATA_CACHE=cache, FLEETBENCH_TEST_JOB=job_id,
                                                       **(extra_env or {})),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = process_stacks(job_pids(job_id, variable="FLEETBENCH_TEST_JOB"))
        kill_job(job_id)
        out = proc.communicate()[0]
        # the launcher's output says little of a hang; the servers' and workers' own logs and stacks do
        pytest.fail(f"job did not end within {timeout} s:\n{out[-1500:]}{worker_log_tails(log_dir, 20, '*log.*')}"
                    f"{stacks}")
    # the job ended by itself: once its launcher has exited, nothing of it runs on. The bound only
    # lets exits already under way finish on a loaded machine; what would run on (a server nobody
    # stopped) fails however long it is.
    if not wait_for(lambda: not job_pids(job_id, variable="FLEETBENCH_TEST_JOB"), 30):
        left = {pid: _command_line(pid) for pid in job_pids(job_id, variable="FLEETBENCH_TEST_JOB")}
        kill_job(job_id)
        pytest.fail(f"processes of the job were still running 30 s after its launcher exited: {left}\n{out[-2000:]}")
    return out, proc.returncode, log_dir


def check_record(rec, benchmark, mode, workers, unit):
    assert rec["benchmark"] == benchmark and rec["mode"] == "ps" and rec["method"] == mode
    assert rec["preset"] == "tiny" and rec["world_size"] == workers and rec["error"] is None
    m = rec["metrics"]
    assert m["unit"] == unit and m["throughput"] > 0 and m["elapsed_s"] > 0
    assert len(m["rank_elapsed_s"]) == workers and m["elapsed_s"] == max(m["rank_elapsed_s"])
    assert m["workers"] == workers and m["measured_steps"] > 0
    assert m["loss_first"] > 0 and m["loss_last"] > 0
    assert set(m) <= set(metrics.DEFINITIONS)  # one vocabulary (docs/reference/metrics.md)
    # servers and workers are the job's (measure/interference.py): the job used the CPU in its window
    # (gloo carries float32: a thousandth of a percent of slack)
    assert m["job_cpu_pct"] > 0 and 0 <= m["interference_cpu_pct"] <= 100 - m["job_cpu_pct"] + 1e-3
    # the slowest worker's time per one of its own steps, as in the collective family
    assert m["step_time_ms"] == pytest.approx(1000 * m["elapsed_s"] / m["measured_steps"])
    # the machine-speed probe beside the interference, every worker together outside the passes
    # (machine/speed.py), and each worker's step times, which add up to its window (issue 44)
    assert all(m[key] > 0 for key in metrics.PROBE_KEYS) and m["probe"] == speed.DEFINITION
    assert len(m["step_times_ms"]) == workers
    for times, elapsed in zip(m["step_times_ms"], m["rank_elapsed_s"]):
        assert len(times) > 0 and sum(times) == pytest.approx(1000 * elapsed, abs=0.01 * len(times))
    check_breakdown(rec)
    return m


def check_breakdown(rec):
    """Every PS record's step breakdown (train/ps/marks.py, issue 45) and its servers' and workers'
    probe figures (issue 44): identities and orderings that hold whatever the machine's load."""
    m, servers = rec["metrics"], rec["config"]["runtime"]["servers"]
    if not rec["config"]["measure"]["breakdown"]:  # the marks left out: no breakdown, nothing to add up
        assert "step_breakdown" not in m
        return
    block = m["step_breakdown"]
    assert block["family"] == "ps" and block["units"] == "ms per measured step" and len(block["ranks"]) == rec["world_size"]
    for worker, row in enumerate(block["ranks"]):
        # the parts and what they leave make the step, which is the worker's own (rank_step_ms)
        assert sum(row[p] for p in PS_PARTS) + row["other"] == pytest.approx(row["step"])
        assert row["step"] == pytest.approx(m["rank_step_ms"][worker], rel=1e-6)
        assert row["compute"] > 0 and row["meter"] > 0 and row["push"] > 0 and row["reader"] >= 0
        # async pulls its sparse rows on the step's thread; GEO looks them up locally (compute)
        assert row["pull"] > 0 if rec["method"] == "async" else row["pull"] == 0
        # the communicator's own threads send every step's (async) or every k_steps' (geo) changes
        assert row["client_cpu"] > 0
    # every server shares this machine with the workers: seen, with the CPU it used in the window
    assert [s["endpoint"] for s in block["servers"]] == [s["endpoint"] for s in m["ps_probe"]["servers"]]
    assert len(block["servers"]) == servers
    for server in block["servers"]:
        assert server["cpu_s"] >= 0 and server["window_s"] == pytest.approx(m["elapsed_s"])
        assert server["busy"] == pytest.approx(server["cpu_s"] / server["window_s"])
    # the probe of every process: workers by worker, servers by server, before and after
    assert len(m["ps_probe"]["workers"]) == rec["world_size"]
    for figures in m["ps_probe"]["workers"] + m["ps_probe"]["servers"]:
        assert all(figures[key] > 0 for key in metrics.PROBE_KEYS), m["ps_probe"]


def rank_lines(logs):
    found = {}
    for text in logs.values():
        for m in re.finditer(r"^rank (\d+) measured_steps (\d+) elapsed_s ([\d.]+) samples (\d+) units (\d+)$",
                             text, re.M):
            found[int(m[1])] = (int(m[2]), float(m[3]), int(m[4]), int(m[5]))
    return found


def worker_files(logs):
    found = {}
    for text in logs.values():
        for m in re.finditer(r"^worker (\d+)/\d+ .* files (.*)$", text, re.M):
            found[int(m[1])] = m[2].split()
    return found


# ------------------------------------------------------------------ CTR
def test_ctr_async_one_server_one_worker_learns(tmp_path, cache):
    out, recs, logs = job(tmp_path, cache, ["--server_num", "1", "--trainer_num", "1"], "ctr.py")
    assert len(recs) == 1
    m = check_record(recs[0], "ctr", "async", 1, "examples/s")
    # the planted relation is learned through the servers within one pass (progressive AUC:
    # every batch is scored before the update it causes)
    assert m["auc"] >= 0.65, m
    assert 0 < m["logloss"] < 0.62  # below the entropy of the ~30 % click rate
    assert m["invalid_lines"] == 0 and m["valid_lines"] == 12000 and m["examples"] <= 12000
    assert "FLEETBENCH_RESULT " in logs["workerlog.0"]
    # worker 0 ends with the summary line of its record (measure/resultline): servers/workers
    line = util.result_line(logs["workerlog.0"], recs[0], tmp_path / "runs.jsonl")
    assert line.startswith("fleetbench result: ctr tiny 1/1 async | ")  # (what stopping the servers says may follow)
    assert re.search(r"^step \d+/\d+ loss [\d.]+ ips [\d.]+ examples/s avg_batch_cost", logs["workerlog.0"], re.M)
    # Paddle's table-configuration prints and INFO lines are kept out of the worker's log
    assert "table_name" not in logs["workerlog.0"] and "communicator config" not in logs["workerlog.0"]


def test_ctr_async_two_by_two_legacy_launcher_shards_and_skips_invalid_lines(tmp_path, cache):
    data = tmp_path / "criteo"
    files = criteo.generate(data, rows=4000, files=4, seed=3)
    bad = ["1\t2\n", "x" + "\t" * 39 + "\n", "0" + "\t" * 38 + "\tdeadbeeg\n"]
    with open(files[1], "a") as f:
        f.writelines(bad[:2])
    with open(files[2], "a") as f:
        f.write(bad[2])
    out, recs, logs = job(tmp_path, cache, ["--server_num", "2", "--worker_num", "2"], "ctr.py",
                          f"data.path={data}", "warmup_steps=0")
    m = check_record(recs[0], "ctr", "async", 2, "examples/s")
    assert m["invalid_lines"] == 3 and m["valid_lines"] == 4000 and m["examples"] == 4000
    # sharding: disjoint shares whose union is the data set, each read exactly once
    shares = worker_files(logs)
    assert set(shares) == {0, 1}
    assert not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == sorted(str(f) for f in files)
    ranks = rank_lines(logs)
    for worker, names in shares.items():
        valid = sum(criteo.validate([n])["valid"] for n in names)
        assert ranks[worker][2] == valid  # every valid line of its own files, nothing else
    assert sum(r[2] for r in ranks.values()) == 4000
    slowest = max(ranks.values(), key=lambda r: r[1])
    assert m["measured_steps"] == slowest[0] and m["elapsed_s"] == pytest.approx(slowest[1], abs=1e-6)


def test_ctr_geo_server_num_only(tmp_path, cache):
    # `--server_num` alone: the new launcher starts one trainer; the job must still end. With the
    # step breakdown's marks asked for (measure.breakdown true; off by default), GEO's breakdown
    # adds up (check_record), its pull 0: it looks its rows up locally
    out, recs, logs = job(tmp_path, cache, ["--server_num", "4"], "ctr.py", "mode=geo", "measure.breakdown=true")
    m = check_record(recs[0], "ctr", "geo", 1, "examples/s")
    assert recs[0]["config"]["runtime"]["servers"] == 4 and m["auc"] > 0.5
    assert recs[0]["config"]["measure"]["breakdown"] is True and m["step_breakdown"]["family"] == "ps"


def test_ctr_two_servers_probe_and_warm_up_until_settled(tmp_path, cache):
    """`fleetrun --server_num 2 ctr.py --preset tiny` with warm-up until the step time settles
    (measure.settle_steps, timing.Steady): the record has its probe figures beside its
    interference, and its warm-up ran from the preset's 10 steps up to the cap."""
    out, recs, logs = job(tmp_path, cache, ["--server_num", "2"], "ctr.py", "measure.settle_steps=60")
    m = check_record(recs[0], "ctr", "async", 1, "examples/s")
    assert 10 <= m["warmup_steps"] <= 60 and isinstance(m["warmup_settled"], bool)
    assert m["warmup_settled"] or m["warmup_steps"] == 60
    (rank,) = rank_lines(logs).values()
    assert m["measured_steps"] == rank[0] == len(m["step_times_ms"][0])
    assert m["interference_cpu_pct"] is not None and m["probe_gemm_gflops_after"] > 0
    # the step breakdown's marks are off by default (6 py_func calls cost 5.8% of a tiny step)
    assert recs[0]["config"]["measure"]["breakdown"] is False and "step_breakdown" not in m


def test_ctr_two_by_two_breakdown_adds_up_with_servers_busy_probes_and_traces(tmp_path, cache):
    """`fleetbench launch --server_num 2 --trainer_num 2 parameter_server/ctr.py --preset tiny
    --trace T` (issues 44 and 45): each worker's parts make its step (one dataset thread: the
    marks tile it, so `other` is the clock's difference and the row covers it to 5 %), async's
    communicator sent on its own threads in the window, each server was busy in it and probed at
    both its edges, and each worker wrote a Chrome trace whose steps hold their parts."""
    traces = tmp_path / "T"
    out, recs, logs = job(tmp_path, cache, ["--server_num", "2", "--trainer_num", "2"], "ctr.py",
                          via="fleetbench", script_args=(f"--trace={traces}",))
    m = check_record(recs[0], "ctr", "async", 2, "examples/s")
    # fleetbench launch prints the summary line of the record the job stored, found by its id
    line = util.result_line(out, recs[0], tmp_path / "runs.jsonl")
    assert line.startswith("fleetbench result: ctr tiny 2/2 async | ") and " per worker) | " in line
    block = m["step_breakdown"]
    assert block["adds_up"] and block["dataset_threads"] == 1
    assert all(server["cpu_s"] > 0 for server in block["servers"]), block["servers"]
    assert [Path(p).parent for p in m["trace_files"]] == [traces, traces]
    for worker, path in enumerate(m["trace_files"]):
        doc = json.loads(Path(path).read_text())
        assert util.chrome_trace_problems(doc) == [] and {e["pid"] for e in doc["traceEvents"]} == {worker}
        assert doc["otherData"]["breakdown"] == block["ranks"][worker]
        steps = [e for e in doc["traceEvents"] if e.get("cat") == "step"]
        parts = [e for e in doc["traceEvents"] if e.get("cat") == "phase"]
        assert {e["name"] for e in parts} <= set(PS_PARTS) and len(steps) == len(m["step_times_ms"][worker])
        assert steps and all(any(s["ts"] <= p["ts"] and p["ts"] + p["dur"] <= s["ts"] + s["dur"] + 1e-3 for s in steps)
                             for p in parts)


def test_ctr_geo_two_by_two_passes_on_until_the_window_lasts_its_seconds(tmp_path, cache):
    """measure.window_s: whole passes until every worker's window has lasted that long (a tiny pass
    measures ~1 s quiet, so 3 s takes 3-4 passes here; fewer on a loaded machine, at least one).
    Both workers run the same passes, every one whole: each worker's examples are its share of the
    data once a pass, less its warm-up."""
    out, recs, logs = job(tmp_path, cache, ["--server_num", "2", "--trainer_num", "2"], "ctr.py", "mode=geo",
                          "measure.window_s=3")
    m = check_record(recs[0], "ctr", "geo", 2, "examples/s")
    ranks = rank_lines(logs)
    assert set(ranks) == {0, 1} and min(r[1] for r in ranks.values()) >= 3.0 and m["elapsed_s"] >= 3.0
    shares = {w: sum(criteo.validate([n])["valid"] for n in names) for w, names in worker_files(logs).items()}
    assert m["passes"] >= 1 and m["valid_lines"] == sum(shares.values())
    for worker, (steps, _, samples, _) in ranks.items():
        assert samples == m["passes"] * shares[worker] - m["warmup_steps"] * 32  # tiny: batch 32, whole batches


def test_ctr_strict_names_file_and_line_and_the_job_ends(tmp_path, cache):
    data = tmp_path / "criteo"
    files = criteo.generate(data, rows=400, files=2, seed=4)
    with open(files[1], "a") as f:
        f.write("1\t2\n")
    # Every worker learns worker 1's error, worker 0 stores the record, all meet at a barrier;
    # then worker 1 exits 1 and worker 0 stops the servers and waits for them to go. The job's
    # exit code is Paddle's launcher's: 1 when it sees worker 0 exit, 241 (SIGTERM) when it sees
    # worker 1 first and stops worker 0 (2 of 3 runs under load). What fleetbench promises is the
    # record, stored before the barrier, naming the file, line and worker.
    out, recs, logs = job(tmp_path, cache, ["--server_num", "1", "--trainer_num", "2"], "ctr.py",
                          f"data.path={data}", "data.strict=true", expect=FAILED)
    assert len(recs) == 1 and recs[0]["metrics"] is None
    assert f"{files[1]}:201: expected 40 tab-separated fields, got 2" in recs[0]["error"]
    assert "worker 1:" in recs[0]["error"]
    # supervised by `fleetbench launch`, the failure is the supervisor's to store: one record, its
    # verdict a worker that exited 1 (worker 1, or worker 0 if it was quicker), never the peer the
    # launcher stopped because of it (job/verdict.py; the order is tested in test_supervisor_decide)
    shutil.rmtree(tmp_path / "log")
    (tmp_path / "runs.jsonl").unlink()
    out, recs, logs = job(tmp_path, cache, ["--server_num", "1", "--trainer_num", "2"], "ctr.py",
                          f"data.path={data}", "data.strict=true", expect=1, via="fleetbench")
    assert len(recs) == 1 and recs[0]["metrics"] is None, recs
    assert re.match(r"launch: worker rank [01] exited with code 1", recs[0]["error"]), recs[0]["error"]
    assert re.search(r"rank [01], role worker, node node0, exit code 1\n", out), out[-3000:]
    assert f"{files[1]}:201: expected 40 tab-separated fields, got 2" in out  # the named rank's log tail


# ------------------------------------------------------------------ Word2Vec
def test_word2vec_async_one_by_one(tmp_path, cache):
    out, recs, logs = job(tmp_path, cache, ["--server_num", "1", "--trainer_num", "1"], "word2vec.py")
    m = check_record(recs[0], "word2vec", "async", 1, "words/s")
    assert m["loss_last"] < m["loss_first"]  # the embeddings learn
    # words/s counts corpus words read (sub-sampled ones too): all of them, minus warm-up
    assert 0 < m["throughput"] * m["elapsed_s"] <= m["valid_lines"] * 30


def test_word2vec_async_two_by_two_explicit_endpoints_legacy(tmp_path, cache, reserve_ports):
    ports = reserve_ports(5)
    servers = ",".join(f"127.0.0.1:{p}" for p in ports[:2])
    workers = ",".join(f"127.0.0.1:{p}" for p in ports[2:4])
    # with an analogy file: worker 0 pulls the trained input vectors from both servers' shards
    data = tmp_path / "w2v"
    word2vec.generate(data, sentences=600, vocabulary=2000, files=4, min_count=2, seed=2021)
    word2vec.synthetic_analogies(data / "analogies.txt", word2vec.read_tokens(data / "dict.txt"), 300, seed=1)
    # --http_port too: the legacy launcher would take gloo's rendezvous port from the ephemeral range
    out, recs, logs = job(tmp_path, cache, ["--servers", servers, "--workers", workers, "--http_port", str(ports[4])],
                          "word2vec.py",
                          f"data.path={data}", f"analogy_path={data / 'analogies.txt'}")
    m = check_record(recs[0], "word2vec", "async", 2, "words/s")
    assert m["analogy_questions"] + m["analogy_skipped"] == 300 and 10 <= m["analogy_skipped"] <= 60
    # random questions (nothing planted): a fraction, near chance over ~1000 words
    assert 0.0 <= m["analogy_accuracy"] <= 0.1


def test_word2vec_geo_one_by_one_legacy(tmp_path, cache):
    out, recs, logs = job(tmp_path, cache, ["--server_num", "1", "--worker_num", "1"], "word2vec.py", "mode=geo")
    check_record(recs[0], "word2vec", "geo", 1, "words/s")


def test_word2vec_geo_two_by_two_explicit_endpoints_new_launcher(tmp_path, cache, reserve_ports):
    ports = reserve_ports(5)  # --gloo_port too: its default is the fixed 6767
    servers = ",".join(f"127.0.0.1:{p}" for p in ports[:2])
    trainers = ",".join(f"127.0.0.1:{p}" for p in ports[2:4])
    # --host: the launcher places the job where this host's name resolves unless told (127.0.1.1 on a
    # Debian machine whose /etc/hosts maps its name there), and the endpoints are 127.0.0.1's
    out, recs, logs = job(tmp_path, cache, ["--servers", servers, "--trainers", trainers, "--gloo_port",
                                            str(ports[4]), "--host", "127.0.0.1"], "word2vec.py", "mode=geo")
    check_record(recs[0], "word2vec", "geo", 2, "words/s")


# ------------------------------------------------------------------ killed
def scratch_reapers(tmp) -> list:
    """Pids of the reapers of scratch directories under `tmp` (the directory is their argument)."""
    marker = f"{tmp}/{scratch.PREFIX}".encode()
    return [pid for pid in procs.process_table() if marker in _read(f"/proc/{pid}/cmdline")]


def test_a_killed_job_leaves_nothing_in_its_directory_or_tmp(tmp_path, cache, request):
    """#16.6: SIGKILL every process of a job in the middle of training (no `finally` runs):
    Paddle's <id>_train_desc.prototxt and the driver's pipe counters lived in each process's
    scratch directory, which its reaper removes."""
    # the job's TMPDIR short, not under tmp_path: Paddle's PS start-up needs one (driver.check_tmpdir)
    cwd, tmp = tmp_path / "cwd", Path(tempfile.mkdtemp(prefix="fbps-", dir="/tmp"))
    cwd.mkdir()
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    job_id, log = uuid.uuid4().hex, tmp_path / "log" / "workerlog.0"
    cmd = [PYTHON, "-m", "paddle.distributed.launch", "--log_dir", str(tmp_path / "log"), "--server_num", "1",
           "--trainer_num", "1", str(REPO / "parameter_server" / "ctr.py"), "--preset", "tiny",
           "--set", "passes=100", "--results", str(tmp_path / "r.jsonl")]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env(FLEETBENCH_DATA_CACHE=cache, TMPDIR=tmp, FLEETBENCH_TEST_JOB=job_id),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        training = wait_for(lambda: log.exists() and "\nstep " in log.read_text(errors="replace"), 180)
        assert training, log.read_text(errors="replace")[-2000:] if log.exists() else "no worker log"
        assert [p.name for p in tmp.iterdir() if p.name.startswith("fleetbench-ps-")]  # in use now
        assert scratch_reapers(tmp)  # found while they wait: their absence later means they ended
    finally:
        kill_job(job_id)
        proc.wait(timeout=30)
    # judged once the reapers have ended (each exits right after its `rm`), not by a deadline;
    # the bound only catches a reaper that never ends
    assert wait_for(lambda: not scratch_reapers(tmp), 60), f"reapers still running: {scratch_reapers(tmp)}"
    assert sorted(p.name for p in tmp.iterdir()) == []
    assert sorted(p.name for p in cwd.iterdir()) == []
    assert not (tmp_path / "r.jsonl").exists()


# ------------------------------------------------------------------ refused before launch
def run_plain(*args):
    return subprocess.run([PYTHON, str(REPO / "parameter_server" / "ctr.py"), *args], cwd=REPO, env=env(),
                          capture_output=True, text=True, timeout=60)


def test_sync_is_refused_with_the_reason():
    done = run_plain("--preset", "tiny", "--set", "mode=sync")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "'mode' is 'sync'" in lines[0] and "docs/guide/ps.md" in lines[0]


def test_a_temporary_directory_too_long_for_paddles_start_up_is_refused_before_launch(tmp_path):
    # found when make test gave its sessions longer directories: every rank logged "AF_UNIX path too
    # long" then "coordinator address is null", and the job ended in a stall
    from fleetbench.train.ps.driver import MAX_TMPDIR_BYTES
    long_tmp = tmp_path / ("t" * max(1, MAX_TMPDIR_BYTES + 1 - len(str(tmp_path)) - 1))
    long_tmp.mkdir()
    def check(tmp):
        return subprocess.run([PYTHON, str(REPO / "parameter_server" / "ctr.py"), "--preset", "tiny", "--check"],
                              cwd=REPO, env=env(TMPDIR=str(tmp)), capture_output=True, text=True, timeout=120)
    refused, fine = check(long_tmp), check("/tmp")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert str(long_tmp) in lines[0] and f"at most {MAX_TMPDIR_BYTES}" in lines[0] and "TMPDIR" in lines[0]
    assert fine.returncode == 0, fine.stderr


def test_outside_the_launcher_is_a_clear_error():
    done = run_plain("--preset", "tiny")
    assert done.returncode == 2 and "run this script under Paddle's launcher" in done.stderr
