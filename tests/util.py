"""Helpers for tests that run real benchmark jobs."""
import concurrent.futures
import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleetbench.job.paddle_launch import LAUNCHER_PORT_RANGE
from fleetbench.job.messages import START_UP, start_up_failure
from fleetbench.job.ranks import progress_step
from fleetbench.train.capability import ps_missing

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# Paddle's launcher run directly gets the port range fleetbench's launches get (job.py says why)
QUIET_ENV = {"GLOG_minloglevel": "2", "PYTHONWARNINGS": "ignore", "PORT_RANGE": LAUNCHER_PORT_RANGE}

# Paddle 3.1+ has no parameter server: its tests skip there, saying why, and only they may skip
# under CI (conftest.py): no install step can give this Paddle build what it lacks.
PS_MISSING = ps_missing()
NEEDS_PS = [pytest.mark.ps, pytest.mark.paddle_build, pytest.mark.skipif(PS_MISSING is not None, reason=PS_MISSING or "")]
# A CPU quota on a node (fleetbench cluster degrade --cpu) needs root and the kernel's cgroup v1 cpu
# controller, which no install step can add: without it those tests skip, saying so, under CI too.
CPU_CGROUP = "/sys/fs/cgroup/cpu"
CPU_CGROUP_MISSING = (None if os.geteuid() == 0 and os.path.isfile(os.path.join(CPU_CGROUP, "cpu.cfs_quota_us"))
                      else f"needs root and a cgroup v1 cpu controller at {CPU_CGROUP} (cpu.cfs_quota_us)")
NEEDS_CPU_CGROUP = [pytest.mark.machine_feature,
                    pytest.mark.skipif(CPU_CGROUP_MISSING is not None, reason=CPU_CGROUP_MISSING or "")]


def needs_cpu_cgroup(test):
    """NEEDS_CPU_CGROUP's marks on one test."""
    for mark in NEEDS_CPU_CGROUP:
        test = mark(test)
    return test


def needs_ps(test):
    for mark in NEEDS_PS:
        test = mark(test)
    return test


# Paddle's switch for CPU ranks on a CUDA build (fleetbench.machine.device.cpu_ranks_asked).
# Tests whose expectations are gloo's (its 30 s timeout, the ops it lacks, its float16 sum on 3.x,
# a CPU rank's refusals) pass it, so that they check the same thing on a GPU host; there Paddle's
# launcher still hands each rank a GPU id, so a 2-rank test needs 2 visible GPUs (docs/guide/gpu.md).
CPU_RANKS = {"PADDLE_DISTRI_BACKEND": "gloo"}


def paddle3_python() -> str:
    """The Paddle 3.x interpreter `make test` installs (tools/test.sh names it in
    FLEETBENCH_TEST_PADDLE3; by hand, the repository's .venv3): a test that needs that build fails,
    saying how to get it, rather than skip."""
    # relative to the repository (make's .venv3/bin/python); never resolved: a virtualenv's python
    # is a symlink to the base interpreter, which has no Paddle
    path = str(REPO / (os.environ.get("FLEETBENCH_TEST_PADDLE3") or ".venv3/bin/python"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path}: no Paddle 3.x interpreter; run `make install-paddle3` (make test does)", pytrace=False)
    return path


def cli_code(cli, argv) -> int:
    """The exit code of a subcommand's `cli(argv)`: what it returns, or its parser's exit (2)."""
    try:
        return cli(argv)
    except SystemExit as e:
        return e.code


def env(**extra) -> dict:
    merged = dict(os.environ, **QUIET_ENV)
    merged.pop("OMP_NUM_THREADS", None)  # let fleetbench choose, as on a fresh shell
    merged.update({k: str(v) for k, v in extra.items()})
    return merged


def process_stacks(pids) -> str:
    """Every process's Python and native stack (py-spy dump, whose first line names the command),
    for the report of a hung job: the rank logs of a 2.6.2 parameter-server job hung in its
    start-up were empty (twice under make test's load), so only the stacks can say where it waited."""
    spy = Path(PYTHON).with_name("py-spy")
    out = []
    for pid in pids:
        try:
            dump = subprocess.run([str(spy), "dump", "--native", "--pid", str(pid)], capture_output=True,
                                  text=True, timeout=30)
            said = dump.stdout if dump.returncode == 0 else f"not read ({(dump.stderr or dump.stdout).strip()})"
        except (OSError, subprocess.TimeoutExpired) as err:
            said = f"not read ({err})"
        out.append(f"\n==== stack of {pid}: {said}")
    return "".join(out)


def _run(cmd, timeout, env_extra) -> subprocess.CompletedProcess:
    """Run a job; on timeout kill every process tagged with its job id (Paddle's launcher starts
    each rank in a session of its own, so killing the launcher alone would leave ranks running)."""
    from fleetbench.job.procs import job_pids

    job_id = uuid.uuid4().hex
    try:
        return subprocess.run(cmd, cwd=REPO, env=env(FLEETBENCH_TEST_JOB=job_id, **env_extra),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pids = job_pids(job_id, variable="FLEETBENCH_TEST_JOB")
        print(f"job timed out after {timeout} s; its processes' stacks:{process_stacks(pids)}", file=sys.stderr)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        raise


def run_script(script, *args, timeout=120, **env_extra) -> subprocess.CompletedProcess:
    """`python SCRIPT args` without a launcher (one process)."""
    return _run([PYTHON, str(REPO / script), *map(str, args)], timeout, env_extra)


def fleetrun(log_dir, *args, timeout=300, **env_extra) -> subprocess.CompletedProcess:
    """`fleetrun --log_dir LOG_DIR args` (Paddle's launcher), run once more when the job failed
    starting up before any rank logged a step, as `fleetbench launch` does (start_up_failed: under
    load fleet.init's gloo handshakes are refused now and then, seen in full-suite runs beside a CPU
    hog; a PS start-up barrier can deadlock, given up after init_timeout_s). The first attempt's
    logs are kept beside LOG_DIR as LOG_DIR.attempt1 and named in stderr, so the retry is never silent."""
    cmd = [PYTHON, "-m", "paddle.distributed.launch", "--log_dir", str(log_dir), *map(str, args)]
    proc = _run(cmd, timeout, env_extra)
    note = ""
    if proc.returncode != 0 and start_up_failed(log_dir):
        kept = Path(f"{log_dir}.attempt1")
        Path(log_dir).rename(kept)
        note = f"\nutil.fleetrun: the job failed starting up, before the first step; ran once more (logs of the first: {kept})\n"
        proc = _run(cmd, timeout, env_extra)
    proc.stderr = note + proc.stderr
    if proc.returncode != 0:
        # Paddle's launcher prints only "exit code 1"; the rank's own traceback is in its log, and a
        # failure seen once in CI cannot be diagnosed without it
        proc.stderr += worker_log_tails(log_dir)
    return proc


# The 2-rank run of each registered collective benchmark (tests/job/test_registered.py) is made
# once per session, with the settings its model's own tests need, and shared with them.
TWO_RANK_SETS = {
    # long enough for loss to halve on the learnable synthetic task: last/first loss 0.51 after 12
    # steps, 0.33 after 16, 0.10 after 24 (2 ranks, tiny, 2026-11-29; the same in repeated runs)
    "resnet50": {"steps": 16},
    # 3001 held-out digits: odd, so the two ranks' shards differ in size (1501 + 1500); many, so
    # evaluation outlasts warm-up. The target is reached after the first epoch (0.17, 0.43, 0.56 here)
    "mnist": {"synthetic_test": 3001, "target_accuracy": 0.4},
}
_TWO_RANK_RUNS = {}


def data_cache(tmp_path_factory) -> Path:
    """The session's FLEETBENCH_DATA_CACHE: synthetic data sets made once and shared by its jobs."""
    if "data-cache" not in _TWO_RANK_RUNS:
        _TWO_RANK_RUNS["data-cache"] = tmp_path_factory.mktemp("data-cache")
    return _TWO_RANK_RUNS["data-cache"]


def two_rank_run(tmp_path_factory, name: str, *sets: str) -> tuple:
    """(finished process, its directory: log/ and r.jsonl) of `fleetrun --nproc_per_node 2` on the
    registered collective benchmark `name` at its tiny preset, with TWO_RANK_SETS[name] and `sets`:
    run by whichever test asks first, once per session."""
    from fleetbench.measure import registry

    sets = tuple(f"{k}={v}" for k, v in TWO_RANK_SETS.get(name, {}).items()) + sets
    if (name, sets) not in _TWO_RANK_RUNS:
        tmp = tmp_path_factory.mktemp(f"{name}-2ranks")
        flags = [x for item in sets for x in ("--set", item)]
        proc = fleetrun(tmp / "log", "--nproc_per_node", 2, registry.get(name, "collective").script, "--preset",
                        "tiny", *flags, "--results", tmp / "r.jsonl",
                        FLEETBENCH_DATA_CACHE=data_cache(tmp_path_factory))
        _TWO_RANK_RUNS[(name, sets)] = proc, tmp
    return _TWO_RANK_RUNS[(name, sets)]


def start_up_failed(log_dir) -> bool:
    """A rank log says the job failed starting up (gloo's refused/timed-out handshake, or a PS
    worker's start-up barrier that never released: fleetbench.job.messages.start_up_failure) and no
    rank logged a step or a result."""
    lines = [line for log in Path(log_dir).glob("workerlog.*")
             for line in log.read_text(errors="replace").splitlines()]
    return any(start_up_failure(line) for line in lines) and not any(progress_step(line) for line in lines)


def assert_launched(record: dict, executor: str, hosts: list) -> None:
    """The record was launched by `executor` on `hosts`, at once or, if a second attempt, after a
    start-up failure: `fleetbench launch` runs a job once more when gloo's rendezvous or a PS
    start-up failed before any step, and on a loaded machine that is the product working (a fresh
    clone, 2026-11-29: `connect [127.0.0.1]:22963: Connection refused` in ProcessGroupGloo.create,
    then a good second attempt, failed a test that wanted no `attempt` in the record)."""
    launch = dict(record["launch"])
    attempt, why = launch.pop("attempt", None), launch.pop("retried_after", "")
    assert launch == {"executor": executor, "hosts": hosts}, record["launch"]
    assert attempt in (None, 2) and (attempt is None or any(f"log says {m}" in why for m in START_UP)), \
        record["launch"]


def worker_log_tails(log_dir, lines: int = 30, pattern: str = "workerlog.*") -> str:
    """The last `lines` lines of every rank log (`pattern`) under `log_dir`, each headed by its name."""
    out = []
    for log in sorted(Path(log_dir).glob(pattern)):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"\n==== {log.name} (last {len(tail)} lines) ====\n" + "\n".join(tail))
    return "".join(out)


def records(path) -> list:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


RANK_LINE = re.compile(r"^rank (\d+) measured_steps (\d+) elapsed_s ([\d.]+) samples ([\d.]+) units ([\d.]+)$",
                       re.M)


def rank_summaries(log_dir) -> dict:
    """{rank: (measured_steps, elapsed_s, samples, units)} from the workers' own log lines."""
    found = {}
    for log in Path(log_dir).glob("workerlog.*"):
        for m in RANK_LINE.finditer(log.read_text(errors="replace")):
            found[int(m[1])] = (int(m[2]), float(m[3]), float(m[4]), float(m[5]))
    return found


def wait_for(check, timeout) -> bool:
    """Poll `check()` every 0.1 s until it is true (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def cluster_name(tag: str = "fb") -> str:
    """A name for one test's emulated cluster: `tag` and random base-36 digits, 8 characters in
    all (netem's limit, so `<name>-h<i>` fits an interface name). Two runs at once draw the same
    one about once in 2e9 (a pid-derived name: once in a few hundred), and netem refuses a name
    whose objects are not its own, so even then nothing is shared."""
    n, name = uuid.uuid4().int, tag
    while len(name) < 8:
        n, digit = divmod(n, 36)
        name += "0123456789abcdefghijklmnopqrstuvwxyz"[digit]
    return name


@contextlib.contextmanager
def emulated_nodes(daemons, prefix: str, state, profile: str = "unshaped"):
    """2 emulated nodes named `prefix` at `profile`, whose state lives in `state`, with `daemons`
    (fleetbench.emulate.sshd or .slurmd) up on them; yields what `daemons.up` returns plus `state`.
    Everything is taken down, and FLEETBENCH_CLUSTER_STATE_DIR restored, however the test ends."""
    from fleetbench.emulate import netem

    old = os.environ.get("FLEETBENCH_CLUSTER_STATE_DIR")
    os.environ["FLEETBENCH_CLUSTER_STATE_DIR"] = str(state)
    try:
        netem.up(2, netem.shaping_from(profile), prefix=prefix)
        yield dict(daemons.up(prefix), state=str(state))
    finally:
        daemons.down(prefix)
        netem.down(prefix)
        if old is None:
            os.environ.pop("FLEETBENCH_CLUSTER_STATE_DIR", None)
        else:
            os.environ["FLEETBENCH_CLUSTER_STATE_DIR"] = old



@contextlib.contextmanager
def slurm_nodes(tag: str):
    """A real Slurm on 2 emulated nodes (munged, slurmctld, a slurmd in each namespace), named
    `tag` and random digits; yields what emulated_nodes yields. Its state directory is short:
    slurmstepd's socket path (state dir + spool + node + job and step ids) must fit 107 bytes,
    which pytest's own tmp paths need not leave (slurmd.up refuses otherwise)."""
    import shutil
    import tempfile

    from fleetbench.emulate import slurmd

    state = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir="/tmp"))
    try:
        with emulated_nodes(slurmd, cluster_name(tag), state) as nodes:
            yield nodes
    finally:
        shutil.rmtree(state, ignore_errors=True)


def kept_store(path) -> str:
    """A results store holding one valid record, as a user's store would before a refused run; its
    text, for checking that the refusal left it as it was (a store with a line that is not a record
    is itself refused, before the config is read)."""
    from fleetbench.measure import contract
    from fleetbench.store import results

    record = results.make_record(contract.RunIdentity(benchmark="resnet50", mode="collective", method="bsp",
                                                      preset="tiny", config={"batch_size": 8}, nodes=1,
                                                      devices_per_node=1, world_size=1),
                                 {"throughput": 10.0, "unit": "images/s"}, env={}, topology=None)
    text = results.dumps(record) + "\n"
    Path(path).write_text(text)
    return text


class Group:
    """A communicator (measure/metrics.Communicator) per rank for ranks run as threads: every call is
    a real collective (each rank puts its values, all wait, all read every rank's), so
    metrics.reduce runs as in a job, whatever it asks of its communicator."""

    def __init__(self, size: int):
        self.barrier, self.slots = threading.Barrier(size, timeout=30), [None] * size

    def of(self, rank: int):
        group = self

        class Comm:
            def _all(self, values):
                group.slots[rank] = list(values)
                group.barrier.wait()
                rows = [list(r) for r in group.slots]
                group.barrier.wait()
                return rows

            def sum(self, values):
                return [sum(col) for col in zip(*self._all(values))]

            def max(self, values):
                return [max(col) for col in zip(*self._all(values))]

            def gather(self, values):
                return self._all(values)
        return Comm()


def reduced(*ranks) -> list:
    """metrics.reduce of each rank's figures (RankFigures, by rank), the ranks run together."""
    from fleetbench.measure import metrics

    group = Group(len(ranks))
    with concurrent.futures.ThreadPoolExecutor(len(ranks)) as pool:
        done = [pool.submit(metrics.reduce, mine, group.of(i)) for i, mine in enumerate(ranks)]
        return [d.result(timeout=60) for d in done]


def chrome_trace_problems(doc: dict) -> list[str]:
    """What breaks the Chrome Trace Event Format schema (tests/fixtures/chrome_trace.schema.json)
    in a trace document, one line each; [] when it is a valid trace."""
    import jsonschema

    schema = json.loads((REPO / "tests" / "fixtures" / "chrome_trace.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def limit_consistent(limit) -> bool:
    """fleetbench.comm.limits' rule restated from the figures a Limit carries (tests of real runs use it)."""
    from fleetbench.comm import limits

    c = {k: v for k, v in limit.ceilings.items() if v}
    if limit.limit == "link":
        return limit.busbw_GBps >= limits.LINK_SHARE * c["link"]
    if c.get("link") and limit.busbw_GBps >= limits.LINK_SHARE * c["link"]:
        return False  # near the link, yet named otherwise
    others = {k: v for k, v in c.items() if k != "link"}
    if limit.limit in ("unexplained", "cpu_busy"):
        busy = limit.busy_pct is not None and limit.busy_pct >= limits.CPU_BUSY_PCT
        return (all(limit.busbw_GBps < limits.EXPLAINS * v for v in others.values())
                and busy == (limit.limit == "cpu_busy"))
    return (others[limit.limit] == min(others.values())
            and limit.busbw_GBps >= limits.EXPLAINS * others[limit.limit])


def result_line(output: str, record: dict, store) -> str:
    """The one `fleetbench result:` line of `output`, checked against the stored `record`: it is
    the line measure/resultline builds from that record, and its throughput is the record's to the
    digits printed (read back from the text, not rebuilt)."""
    from fleetbench.measure import resultline

    lines = [line for line in output.splitlines() if line.startswith(resultline.PREFIX)]
    assert len(lines) == 1, f"expected one result line, got {lines}"
    line = lines[0]
    assert line == resultline.line(resultline.fields_of(record, str(store))), line
    figure = line.split(" | ")[1].split()
    m = record["metrics"]
    if record["mode"] == "comm":
        assert figure[:1] == ["busbw"] and figure[2] == m["unit"], line
        printed, value = figure[1], m["busbw_GBps"]
    else:
        assert figure[1] == m["unit"], line
        printed, value = figure[0], m["throughput"]
    decimals = len(printed.partition(".")[2])
    assert abs(float(printed) - value) <= 0.5 * 10 ** -decimals * (1 + 1e-9), line  # rounded, not another figure
    assert line.endswith(f"{store} id {record['id'][:8]}"), line
    return line


def emulated_sweep(tmp_path, monkeypatch, spec: dict, tag: str) -> tuple:
    """`fleetbench sweep` of `spec` (a sweep file's dict) on an emulated cluster of its own, its
    state under tmp_path, torn down whatever happens; (the finished process, the store, the name)."""
    import yaml

    from fleetbench.emulate import netem

    name, state_dir = cluster_name(tag), tmp_path / "state"  # its subnet: the first free one, under a lock
    path, store = tmp_path / "sweep.yaml", tmp_path / "runs.jsonl"
    path.write_text(yaml.safe_dump(spec))
    try:
        p = subprocess.run([PYTHON, "-m", "fleetbench", "sweep", str(path), "--results", str(store),
                            "--log-dir", str(tmp_path / "log"), "--cluster-name", name], cwd=REPO,
                           env=env(FLEETBENCH_CLUSTER_STATE_DIR=state_dir), capture_output=True, text=True,
                           timeout=600)
    finally:
        monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(state_dir))
        netem.down(name)  # the sweep already did; this guards a failed run
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p, store, name

