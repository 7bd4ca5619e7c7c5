"""The shared parameter-server driver behind parameter_server/*.py.

A script declares its config dataclass (a PSConfig) and `build(cfg, files) -> Workload` (model,
data pipe, optimizer); `main()` does the rest under Paddle's launcher:

    roles     TRAINING_ROLE from fleetrun: servers serve tables until told to stop, workers train
    modes     async (a_sync), geo (a_sync + k_steps); sync is refused (see SYNC_REFUSAL)
    data      Fleet InMemoryDataset/QueueDataset fed by the script's pipe_command, trained with
              exe.train_from_dataset over `data.num_workers` threads; whole files are dealt to
              workers round-robin, so every worker reads a disjoint share
    window    a py_func appended to the program counts every batch (its rows, its units, its
              loss); the first `warmup_steps` batches of each worker are excluded; a worker's
              measured window runs from the end of its last warm-up batch to the end of its last
              batch of the last pass; the job's wall time is the slowest worker's window
    results   summed over workers by gloo; worker 0 prints FLEETBENCH_RESULT and appends a record
    shutdown  all workers meet at a barrier, then worker 0 tells the servers to stop, so the
              whole job ends by itself under either launcher

This module imports paddle only inside functions: the config must be checked before paddle
starts (and OMP_NUM_THREADS set for the process's role).
"""
import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import math
import os
import shlex
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

import fleetbench
from fleetbench.measure import config, registry

MODES = ("sync", "async", "geo")
DATASETS = ("InMemoryDataset", "QueueDataset")
# Why mode=sync is refused: measured on paddlepaddle 2.6.2 (CPU), evidence in docs/ps.md.
SYNC_REFUSAL = (
    "config key 'mode' is 'sync', which Paddle 2.6.2's CPU parameter server cannot run: its sync "
    "trainer program ends every step with send_barrier, which calls a Communicator that "
    "TheOnePSRuntime._init_worker never creates in sync mode (segfault in SendBarrierOp); creating "
    "one unstarted makes the barrier a no-op and dense parameters are never pulled, and starting it "
    "deadlocks because dense gradients bypass its send queue (docs/ps.md#sync); use mode=async or mode=geo")


@dataclasses.dataclass
class PSConfig(config.BenchConfig):
    mode: str = "async"  # async | geo (sync: refused, see SYNC_REFUSAL)
    k_steps: int = 100  # geo: local steps between parameter exchanges with the servers
    dataset: str = "InMemoryDataset"  # or QueueDataset (streams files each pass)
    passes: int = 1  # passes over each worker's files; all of them are timed (minus warm-up)
    steps: int = 0  # not used: train_from_dataset runs whole passes (set passes instead)

    def validate(self) -> None:
        req = _require
        req(self.mode in MODES, "mode", "must be async or geo", self.mode)
        if self.mode == "sync":
            raise config.ConfigError(SYNC_REFUSAL)
        req(self.k_steps >= 1, "k_steps", "must be >= 1", self.k_steps)
        req(self.dataset in DATASETS, "dataset", "must be InMemoryDataset or QueueDataset", self.dataset)
        req(self.passes >= 1, "passes", "must be >= 1", self.passes)
        req(self.steps == 0, "steps", "is not used by parameter-server benchmarks "
            "(train_from_dataset runs whole passes); set passes and warmup_steps instead", self.steps)
        req(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
        req(self.warmup_steps >= 0, "warmup_steps", "must be >= 0", self.warmup_steps)
        req(self.log_every > 0, "log_every", "must be > 0", self.log_every)
        req(self.lr > 0, "lr", "must be > 0", self.lr)
        req(self.data.num_workers >= 1, "data.num_workers", "is the dataset thread count and must be >= 1",
            self.data.num_workers)
        req(self.debug.delay_ms >= 0, "debug.delay_ms", "must be >= 0", self.debug.delay_ms)
        if self.data.path is not None and not Path(self.data.path).exists():
            raise config.ConfigError(f"config key 'data.path': {self.data.path}: no such file or directory")


def _require(ok, key, expectation, value):
    if not ok:
        raise config.ConfigError(f"config key '{key}' {expectation} (got {value!r})")


@dataclasses.dataclass
class Workload:
    inputs: list  # static data vars, in the order the pipe writes the slots
    loss: object  # mean loss of a batch
    optimizer: object
    pipe_command: str  # reads raw lines on stdin, writes MultiSlot lines; `--stats FILE` is appended
    unit: str = "examples/s"
    units_var: object = None  # per-example count of units (e.g. corpus words); None: 1 per example
    auc_stats: Optional[tuple] = None  # (stat_pos, stat_neg) of paddle.static.auc
    loss_is_logloss: bool = False  # the loss is the mean log loss (then stored as metrics.logloss)
    # worker 0, after the last pass, while the servers still hold the tables: () -> extra metrics
    after_training: Optional[Callable[[], dict]] = None


# ------------------------------------------------------------------ data files and the pipe
def shard(files: list, worker: int, workers: int) -> list:
    """Worker `worker`'s share: every `workers`-th file starting at its index (disjoint, and the
    union over workers is every file)."""
    return list(files[worker::workers])


def pipe_command(module: str, *args) -> str:
    """`python -m MODULE args` with the repository importable, for Dataset.set_pipe_command."""
    path = os.pathsep.join(p for p in (str(registry.REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    words = [sys.executable, "-m", module, *map(str, args)]
    return f"PYTHONPATH={shlex.quote(path)} " + " ".join(shlex.quote(w) for w in words)


def read_pipe_counts(path: str) -> dict:
    """Sum of the counts every pipe process appended (datasets.criteo.append_counts)."""
    totals = {}
    if os.path.exists(path):
        for line in Path(path).read_text().splitlines():
            for key, value in json.loads(line).items():
                totals[key] = totals.get(key, 0) + value
    return totals


def synthetic_dir(name: str, params: dict, make: Callable[[Path], None]) -> Path:
    """A cached synthetic data set: made once per machine by whichever local process gets the
    lock first (the others wait), in a temporary directory renamed into place when complete."""
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    root = Path(os.environ.get("FLEETBENCH_DATA_CACHE", Path.home() / ".cache" / "fleetbench" / "data"))
    final = root / f"{name}-{key}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.exists():
            work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
            try:
                make(work)
                (work / ".params.json").write_text(json.dumps(params, sort_keys=True))
                work.rename(final)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return final


# ------------------------------------------------------------------ roles, threads, quiet logs
def role_from_env() -> dict:
    """The role fleetrun gave this process, read from its environment (no paddle needed)."""
    env = os.environ
    role = env.get("TRAINING_ROLE") or env.get("PADDLE_ROLE")
    if role not in ("PSERVER", "TRAINER"):
        raise config.ConfigError("no parameter-server role in the environment: run this script under "
                                 "Paddle's launcher, e.g. `fleetrun --server_num 1 --trainer_num 1 SCRIPT`")
    servers = [e for e in env.get("PADDLE_PSERVERS_IP_PORT_LIST", "").split(",") if e]
    workers = [e for e in env.get("PADDLE_TRAINER_ENDPOINTS", "").split(",") if e]
    num_workers = int(env.get("PADDLE_TRAINERS_NUM") or len(workers) or 1)
    hosts = {e.rsplit(":", 1)[0] for e in servers + workers}
    here = env.get("POD_IP")
    local = [e for e in servers + workers if e.rsplit(":", 1)[0] == here] if here else []
    return {"role": "server" if role == "PSERVER" else "worker", "servers": servers,
            "workers": num_workers, "worker_endpoints": workers,
            "nodes": int(env.get("FLEETBENCH_NODES") or max(1, len(hosts))),
            "local_workers": max(1, sum(e in workers for e in local)) if local else 1}


def set_threads(cfg: PSConfig, role: dict) -> None:
    """OpenMP threads per process, unless the user chose: servers mostly wait on the network and
    get 1; the node's cores are shared by its workers' dataset threads (each thread runs whole
    batches, so cores / (local workers x threads), at least 1)."""
    if fleetbench.threads_info()["source"] != "fleetbench":
        return  # chosen by the user, or by the sweep for nodes sharing this machine
    if role["role"] == "server":
        threads = 1
    else:
        threads = max(1, fleetbench.usable_cores() // (role["local_workers"] * cfg.data.num_workers))
    os.environ["OMP_NUM_THREADS"] = str(threads)


def quiet_environment() -> None:
    """Before paddle starts: no glog INFO lines (users can still set their own level), and gloo
    on for the worker barriers even under the legacy launcher, which leaves it off by default."""
    os.environ.setdefault("GLOG_minloglevel", "1")
    if os.environ.get("PADDLE_WITH_GLOO", "0") == "0" and os.environ.get("PADDLE_GLOO_HTTP_ENDPOINT"):
        os.environ["PADDLE_WITH_GLOO"] = "1"


def import_http_server_elsewhere() -> None:
    """With gloo's HTTP rendezvous (the legacy launcher; see quiet_environment) worker 0 runs
    Paddle's KV server, whose module opens `http.log` in the current directory when imported
    (a logging.FileHandler, which keeps the absolute path). Import it first from a temporary
    directory and drop that handler, so nothing lands in the user's directory; the log only
    lists the rendezvous' HTTP requests."""
    import logging
    with tempfile.TemporaryDirectory(prefix="fleetbench-http-") as scratch, contextlib.chdir(scratch):
        from paddle.distributed.fleet.utils import http_server
    logger = logging.getLogger(http_server.__name__)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.addHandler(logging.NullHandler())


class Quiet:
    """Swallow Paddle's plain print()s (table configs, program ids) and its warnings; they are
    replayed on stderr if the wrapped block fails. Our own lines go to the real stdout."""

    def __init__(self):
        self.buffer = io.StringIO()

    def __enter__(self):
        import warnings
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(contextlib.redirect_stdout(self.buffer))
        self._stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, kind, value, tb):
        self._stack.close()
        if kind is not None:
            sys.stderr.write(self.buffer.getvalue())
        return False


OUT = sys.stdout  # captured at import, before any redirect


def say(text: str) -> None:
    print(text, file=OUT, flush=True)


# ------------------------------------------------------------------ fleet
def sparse_tables(program) -> list:
    """Names of the parameters looked up with is_sparse=True (they become server sparse tables)."""
    return sorted({op.input("W")[0] for op in program.global_block().ops
                   if op.type in ("lookup_table", "lookup_table_v2") and op.attr("is_sparse")})


def strategy_for(cfg: PSConfig, optimizer, program):
    import paddle
    from paddle.distributed import fleet
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    if cfg.mode == "geo":
        strategy.a_sync_configs = {"k_steps": cfg.k_steps}
    elif isinstance(optimizer, paddle.optimizer.SGD):
        # Paddle 2.6.2 gives SGD's sparse tables the Adam rule (Accessor._set falls into an
        # `else` after its `sgd` branch); name the plain SGD rule so the servers run SGD.
        for name in sparse_tables(program):
            table = strategy.sparse_table_configs.add()
            table.table_name = name
            table.accessor.embed_sgd_param.name = "SparseNaiveSGDRule"
            table.accessor.embedx_sgd_param.name = "SparseNaiveSGDRule"
    return strategy


class Gloo:
    """The workers' collectives (fleet.util over gloo): barrier, sum, max."""

    def __init__(self, worker: int, workers: int):
        from paddle.distributed import fleet
        self.util, self.worker, self.workers = fleet.util, worker, workers

    def barrier(self):
        if self.workers > 1:
            self.util.barrier("worker")

    def sum(self, values):
        import numpy as np
        values = np.asarray(values, dtype="float64")
        return values if self.workers == 1 else np.asarray(self.util.all_reduce(values, "sum", "worker"))

    def max(self, values):
        import numpy as np
        values = np.asarray(values, dtype="float64")
        return values if self.workers == 1 else np.asarray(self.util.all_reduce(values, "max", "worker"))

    def per_worker(self, value: float) -> list:
        import numpy as np
        mine = np.zeros(self.workers)
        mine[self.worker] = value
        return self.sum(mine).tolist()

    def agree_on_errors(self, message: Optional[str]) -> List[str]:
        """Every worker learns every worker's error message (gloo sums numbers only, so each
        worker writes its message's bytes into its own row)."""
        import numpy as np
        width = 400
        rows = np.zeros((self.workers, width))
        if message:
            data = message.encode()[:width]
            rows[self.worker, :len(data)] = list(data)
        rows = self.sum(rows).reshape(self.workers, width).astype(int)
        return [f"worker {i}: " + bytes(int(c) for c in row if c).decode(errors="replace")
                for i, row in enumerate(rows) if row.any()]


def accepting(endpoint: str) -> bool:
    host, port = endpoint.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def wait_ports(endpoints, up: bool, deadline_s: float) -> bool:
    """Poll until every server accepts connections (up) or none does (not up). Paddle's own wait
    for servers sleeps 3 s between tries; polling at 0.1 s first saves most of that per job."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if all(accepting(e) == up for e in endpoints):
            return True
        time.sleep(0.1)
    return False


def stop_job(worker: int, gloo: Gloo, servers: list) -> None:
    """End the job: every worker finalizes its client, all meet, then worker 0 sends the stop
    command to every server (fleet.stop_worker alone never does, so servers would serve forever
    under the new launcher) and waits for them to leave, so the legacy launcher, which kills
    servers once workers exit, finds them already gone."""
    from paddle.distributed import fleet
    with Quiet():
        fleet.stop_worker()
    gloo.barrier()
    if worker == 0:
        fleet.fleet._runtime_handle._worker.stop_server()
        if not wait_ports(servers, up=False, deadline_s=30):
            say("warning: servers still accept connections 30 s after the stop request")


def sparse_table_rows(name: str):
    """Every row of the servers' sparse table for parameter `name` (row i = id i), pulled to this
    worker: Paddle's client pulls ids 0..rows-1 from every server and writes one tensor file
    (DistFleetWrapper.recv_and_save_model, what fleet's inference save uses for such tables),
    read back here. Observed on 2.6.2: all 1002 rows of a 2-server table, trained values."""
    import numpy as np
    from paddle.base import core
    from paddle.distributed import fleet
    runtime = fleet.fleet._runtime_handle
    table = {ctx.origin_varnames()[0]: ctx.table_id() for ctx in runtime._send_ctx.values() if ctx.is_sparse()}
    if f"{name}@GRAD" not in table:
        raise ValueError(f"no sparse table for parameter {name!r} (tables: {sorted(table)})")
    with tempfile.TemporaryDirectory(prefix="fleetbench-table-") as out:
        runtime._worker.recv_and_save_model(table[f"{name}@GRAD"], out)
        tensor = core.LoDTensor()
        core.load_lod_tensor(tensor, os.path.join(out, name))
        return np.array(tensor)


# ------------------------------------------------------------------ the measured window
class StepMeter:
    """Called after every batch (from Paddle's trainer threads, through a py_func op)."""

    def __init__(self, cfg: PSConfig, worker: int):
        self.cfg, self.worker = cfg, worker
        self.unit, self.total_hint, self.auc_stats = "examples/s", 0, None
        self.lock = threading.Lock()
        self.delay_s = cfg.debug.delay_ms / 1000 if cfg.debug.delay_rank == worker else 0.0
        self.step = 0
        self.begin()
        self.auc_start = None
        self.examples = self.units = self.loss_sum = 0.0
        self.loss_first = self.loss_last = None

    def begin(self):
        """Training starts now (the first logging window, and the measured one without warm-up)."""
        self.start = self.last = time.perf_counter()
        self.window = self._empty_window(self.start)
        self.measure_start = self.start if self.cfg.warmup_steps == 0 else None

    @staticmethod
    def _empty_window(now):
        return {"start": now, "steps": 0, "units": 0.0, "loss": 0.0, "rows": 0}

    def snapshot_auc(self):
        import numpy as np
        import paddle
        scope = paddle.static.global_scope()
        return [np.array(scope.find_var(v.name).get_tensor()) for v in self.auc_stats]

    def __call__(self, *tensors):
        try:
            self._step(*tensors)
        except BaseException:  # Paddle reports a py_func failure only as "std::exception"
            import traceback
            traceback.print_exc()
            raise

    def _step(self, rows_var, loss_var, units_var=None):
        import numpy as np
        if self.delay_s:
            time.sleep(self.delay_s)  # test-only: makes this worker the slow one
        rows = int(np.array(rows_var).shape[0])
        units = float(np.array(units_var).sum()) if units_var is not None else float(rows)
        loss = float(np.array(loss_var).reshape(-1)[0])
        with self.lock:
            now = time.perf_counter()
            self.step += 1
            self.last = now
            win = self.window
            win["steps"] += 1
            win["units"] += units
            win["rows"] += rows
            win["loss"] += loss * rows
            if self.measure_start is not None:
                self.examples += rows
                self.units += units
                self.loss_sum += loss * rows
            if self.step % self.cfg.log_every == 0:
                self._log(now)
            if self.step == self.cfg.warmup_steps:
                self.measure_start = now
                if self.auc_stats:
                    self.auc_start = self.snapshot_auc()

    def _log(self, now):
        win = self.window
        elapsed = max(now - win["start"], 1e-12)
        loss = win["loss"] / max(win["rows"], 1)
        self.loss_first = loss if self.loss_first is None else self.loss_first
        self.loss_last = loss
        from fleetbench.measure.timing import log_line
        say(log_line(self.step, self.total_hint, loss, win["units"] / elapsed, self.unit,
                     elapsed / max(win["steps"], 1), math.nan))
        self.window = self._empty_window(now)

    def finish(self) -> dict:
        with self.lock:
            if self.window["steps"]:
                self._log(self.last)
            measured = self.step - self.cfg.warmup_steps
            if measured <= 0:
                raise ValueError(f"warm-up ({self.cfg.warmup_steps} steps) used all {self.step} steps; "
                                 f"lower warmup_steps, add passes or data")
            return {"steps": measured, "elapsed_s": self.last - self.measure_start,
                    "examples": self.examples, "units": self.units, "loss_sum": self.loss_sum,
                    "loss_first": self.loss_first, "loss_last": self.loss_last}


def build_programs(cfg: PSConfig, build: Callable, meter: StepMeter):
    """The script's model with the meter appended, then Fleet's PS passes. Returns the workload,
    the program to train (Fleet replaces it: loss.block.program) and the startup program."""
    import paddle
    from paddle.distributed import fleet
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()), Quiet():
        paddle.seed(cfg.seed)
        work = build(cfg)
        meter.unit, meter.auc_stats = work.unit, work.auc_stats
        # rows are counted on the last input (the label slot), units on units_var when given
        watched = [work.inputs[-1], work.loss] + ([work.units_var] if work.units_var is not None else [])
        paddle.static.py_func(func=lambda *tensors: meter(*tensors), x=watched, out=None)  # needs a function
        strategy = strategy_for(cfg, work.optimizer, paddle.static.default_main_program())
        fleet.distributed_optimizer(work.optimizer, strategy).minimize(work.loss)
        return work, work.loss.block.program, paddle.static.default_startup_program()


# ------------------------------------------------------------------ worker
def make_dataset(cfg: PSConfig, work: Workload, files: list, counts_path: str):
    import paddle
    dataset = (paddle.distributed.InMemoryDataset() if cfg.dataset == "InMemoryDataset"
               else paddle.distributed.QueueDataset())
    dataset.init(batch_size=cfg.batch_size, thread_num=cfg.data.num_workers, use_var=work.inputs,
                 pipe_command=f"{work.pipe_command} --stats {shlex.quote(counts_path)}")
    dataset.set_filelist([str(f) for f in files])
    return dataset


def count_lines(files) -> int:
    total = 0
    for path in files:
        with open(path, "rb") as handle:
            total += sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    return total


def load_data(cfg: PSConfig, work: Workload, mine: list, first_error: Callable, counts_path: str):
    """This worker's dataset: (dataset, rows per pass, load seconds). ValueError for bad data."""
    if not mine:
        raise ValueError("no data file for this worker: each worker reads whole files, so there must "
                         "be at least as many files as workers")
    if cfg.data.strict:
        bad = first_error(mine)
        if bad:
            raise ValueError(f"invalid input line (data.strict): {bad}")
    with Quiet():
        dataset = make_dataset(cfg, work, mine, counts_path)
        if cfg.dataset == "QueueDataset":  # streams the files during each pass
            return dataset, count_lines(mine), 0.0
        tick = time.perf_counter()
        dataset.load_into_memory()
        return dataset, dataset.get_memory_data_size(), time.perf_counter() - tick


def train_pass(exe, program, dataset, threads: int) -> None:
    """One pass of exe.train_from_dataset, leaving nothing in the user's directory: Paddle 2.6.2
    writes its trainer description to `<id(program)>_train_desc.prototxt` in the current directory
    on every call (Executor._dump_debug_info, unconditionally). The files read by the dataset may
    be relative paths, so the directory cannot be changed around the call; the file is removed."""
    try:
        exe.train_from_dataset(program=program, dataset=dataset, thread=threads)
    finally:
        names = [f"{id(program)}_train_desc.prototxt"]
        if program._fleet_opt and "fleet_desc" in program._fleet_opt:  # Paddle's own condition
            names.append("fleet_desc.prototxt")
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.remove(name)


def run_worker(benchmark, cfg, args, role, build, files, first_error) -> int:
    import paddle
    from paddle.distributed import fleet

    worker, workers = fleet.worker_index(), fleet.worker_num()
    gloo = Gloo(worker, workers)
    wait_ports(role["servers"], up=True, deadline_s=600)  # then Paddle's own wait passes at once
    meter = StepMeter(cfg, worker)
    work, main_program, startup = build_programs(cfg, build, meter)
    exe = paddle.static.Executor(paddle.CPUPlace())
    with Quiet():
        exe.run(startup)
        fleet.init_worker()

    # Every worker learns every worker's problem before anyone trains, so none waits for one
    # that gave up, and all end the job together.
    mine = shard(files, worker, workers)
    with tempfile.TemporaryDirectory(prefix="fleetbench-pipe-") as counts_dir:
        counts_path, problem = os.path.join(counts_dir, "counts.jsonl"), None
        try:
            dataset, rows_per_pass, load_s = load_data(cfg, work, mine, first_error, counts_path)
        except (ValueError, OSError) as err:
            problem = str(err)
        if fail_together(gloo.agree_on_errors(problem), worker, gloo, benchmark, args, cfg, role):
            return 1
        meter.total_hint = cfg.passes * -(-rows_per_pass // cfg.batch_size)  # for the log lines only
        say(f"worker {worker}/{workers} mode {cfg.mode} dataset {cfg.dataset} threads {cfg.data.num_workers} "
            f"omp {fleetbench.threads_info()['omp_num_threads']} files {' '.join(str(f) for f in mine)}")
        gloo.barrier()  # every worker starts its first pass together
        meter.begin()
        with Quiet():
            for _ in range(cfg.passes):
                train_pass(exe, main_program, dataset, cfg.data.num_workers)
        try:
            raw, problem = meter.finish(), None
        except ValueError as err:
            raw, problem = None, str(err)
        if fail_together(gloo.agree_on_errors(problem), worker, gloo, benchmark, args, cfg, role):
            return 1
        raw["pipe"] = read_pipe_counts(counts_path)
        raw["load_s"] = load_s
        try:
            raw["extra"], problem = (work.after_training() if work.after_training and worker == 0 else {}), None
        except (ValueError, OSError) as err:
            raw["extra"], problem = {}, str(err)
        if fail_together(gloo.agree_on_errors(problem), worker, gloo, benchmark, args, cfg, role):
            return 1
    say(f"rank {worker} measured_steps {raw['steps']} elapsed_s {raw['elapsed_s']:.6f} "
        f"samples {raw['examples']:.0f} units {raw['units']:.0f}")
    report(benchmark, cfg, args, role, work, meter, raw, worker, workers, gloo)
    stop_job(worker, gloo, role["servers"])
    return 0


def report(benchmark, cfg, args, role, work, meter, raw, worker, workers, gloo) -> None:
    """Reduce every worker's figures (sums; the slowest window) and, on worker 0, store them."""
    import numpy as np
    from paddle.distributed import fleet
    from fleetbench.measure import results
    sums = gloo.sum([raw["examples"], raw["units"], raw["loss_sum"], raw["steps"], raw["loss_first"],
                     raw["loss_last"], raw["pipe"].get("valid", 0), raw["pipe"].get("invalid", 0)])
    maxes = gloo.max([raw["elapsed_s"], raw["load_s"], peak_memory_mib()])
    rank_elapsed = gloo.per_worker(raw["elapsed_s"])
    auc = None
    if work.auc_stats:  # the AUC buckets' change over the measured window, summed over workers
        end = meter.snapshot_auc()
        start = meter.auc_start or [np.zeros_like(a) for a in end]
        auc = fleet.metrics.auc(end[0] - start[0], end[1] - start[1])
    if worker != 0:
        return
    totals = dict(zip(["examples", "units", "loss_sum", "steps", "loss_first", "loss_last", "valid", "invalid"],
                      sums.tolist()))
    totals.update(zip(["elapsed_s", "load_s", "peak_mem_mib"], maxes.tolist()))
    figures = metrics(cfg, work, totals, rank_elapsed, workers, auc)
    figures.update(raw["extra"])
    results.emit(args.results, record_for(benchmark, args.preset, cfg, role, figures, None))
    say(f"throughput {figures['throughput']:.1f} {work.unit} over {workers} workers"
        + (f" auc {auc:.4f}" if auc is not None else "") + f" invalid_lines {figures['invalid_lines']}")


def fail_together(errors: list, worker, gloo, benchmark, args, cfg, role) -> bool:
    """When any worker reported an error (all workers know the same list): log them, store the
    failed run (worker 0, unless supervised), end the job cleanly everywhere. False when there is nothing to do."""
    if not errors:
        return False
    from fleetbench.measure import results
    for line in errors:
        say(f"error: {line}")
    # Under `fleetbench launch` the supervisor stores the failure, naming the rank that failed
    # first (which need not be this one); a second record would count one run twice.
    if worker == 0 and "FLEETBENCH_JOB_ID" not in os.environ:
        results.emit(args.results, record_for(benchmark, args.preset, cfg, role, None, "; ".join(errors)))
    stop_job(worker, gloo, role["servers"])
    return True


def peak_memory_mib() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def metrics(cfg, work: Workload, t: dict, rank_elapsed: list, workers: int, auc) -> dict:
    elapsed = t["elapsed_s"]
    throughput = t["units"] / elapsed
    out = {
        "throughput": throughput, "unit": work.unit, "throughput_per_device": throughput / workers,
        "samples_per_s": t["examples"] / elapsed,
        "step_time_ms": 1000 * elapsed * workers / t["steps"],
        "reader_time_ms": None,  # train_from_dataset reads inside the step (see docs/ps.md)
        "peak_mem_mib": t["peak_mem_mib"],
        "loss_first": t["loss_first"] / workers, "loss_last": t["loss_last"] / workers,
        "elapsed_s": elapsed, "rank_elapsed_s": rank_elapsed,
        "measured_steps": int(t["steps"]), "warmup_steps": cfg.warmup_steps,
        "omp_num_threads": fleetbench.threads_info()["omp_num_threads"],
        "examples": int(t["examples"]), "valid_lines": int(t["valid"]), "invalid_lines": int(t["invalid"]),
        "load_s": t["load_s"], "passes": cfg.passes, "workers": workers,
    }
    if work.loss_is_logloss:
        out["logloss"] = t["loss_sum"] / max(t["examples"], 1)
    if auc is not None:
        out["auc"] = float(auc)
    return out


def record_for(benchmark, preset, cfg, role, figures, error):
    import paddle
    from fleetbench.measure import results
    resolved = config.to_dict(cfg)
    resolved["runtime"] = {"threads": fleetbench.threads_info(), "paddle": paddle.__version__,
                           "servers": len(role["servers"]), "workers": role["workers"]}
    nodes = role["nodes"]
    return results.make_record(benchmark=benchmark, mode="ps", method=cfg.mode, preset=preset,
                               config=resolved, nodes=nodes, devices_per_node=max(1, -(-role["workers"] // nodes)),
                               world_size=role["workers"], metrics=figures, error=error)


# ------------------------------------------------------------------ entry point
def main(benchmark: str, cls, build: Callable, data_files: Callable, first_error: Callable, argv=None) -> None:
    """`data_files(cfg) -> [paths]` resolves data.path (or makes synthetic data);
    `first_error(paths) -> "file:line: reason" | None` serves data.strict."""
    cfg, args = config.parse_args(benchmark, cls, argv)
    if args.check:
        print(json.dumps(config.to_dict(cfg), sort_keys=True))
        return
    try:
        role = role_from_env()
        files = data_files(cfg)
    except (config.ConfigError, ValueError) as err:
        config.exit_config_error(benchmark, err)
    set_threads(cfg, role)
    quiet_environment()
    with contextlib.redirect_stderr(io.StringIO()):  # paddle warns about OMP_NUM_THREADS > 1 we chose
        import paddle
    from paddle.distributed import fleet
    paddle.enable_static()
    import_http_server_elsewhere()
    with Quiet():
        fleet.init(log_level="WARNING")
    if role["role"] == "server":
        build_programs(cfg, build, StepMeter(cfg, -1))  # the same program: tables come from it
        with Quiet():
            fleet.init_server()
        fleet.run_server()  # returns when worker 0 sends the stop command
        # Leave at once: the legacy launcher terminates servers as soon as the workers are gone,
        # and a slow interpreter teardown would be cut short by its SIGTERM.
        sys.stdout.flush()
        os._exit(0)
    code = run_worker(benchmark, cfg, args, role, build, files, first_error)
    sys.stdout.flush()
    if code:
        sys.exit(code)
