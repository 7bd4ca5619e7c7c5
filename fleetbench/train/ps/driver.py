"""The parameter-server driver: `main()` runs a server or a worker under Paddle's launcher.

A worker builds the script's program with the meter appended, loads its share of the files,
trains whole passes with train_from_dataset, and reports; worker 0 stores the record through
the run layer and then stops the servers, so the whole job ends by itself. Problems found by any
worker (bad data, a warm-up longer than the data, a failed after-training step) are agreed on by
all workers before anyone goes on, so no worker waits for one that gave up.
"""
import contextlib
import io
import os
import sys
import tempfile
import time
from typing import Any, Callable, Optional

import fleetbench
from fleetbench.machine import speed
from fleetbench.measure import auc as auc_metric
from fleetbench.measure import config, metrics
from fleetbench.train import capability, run
from fleetbench.train.ps import commthread, data, gloo, paddle26, roles, scratch, servers, stepparts
from fleetbench.train.ps.config import PSConfig, Workload
from fleetbench.train.ps.marks import Marks, instrument
from fleetbench.train.ps.meter import StepMeter
from fleetbench.train.ps.paddle26 import Quiet, say


# how long a worker waits for a stopped server's after-probe (its figures come within a second),
# and a stopped server for the workers to read it (a server with no worker on its machine waits it out)
SERVER_PROBE_WAIT_S = 15.0
SERVER_PROBE_HOLD_S = 5.0
# measure.window_s adds passes until the window lasts that long; never more passes than this in all
MAX_PASSES = 1000
# heads a worker's error when its parameters did not come back from the servers as worker 0 pushed
# them (start_up_problem); fleetbench.job.messages reads it as a start-up failure
START_UP_PARAMETERS = "PS start-up: parameter"


def build_programs(cfg: PSConfig, build: Callable, meter: StepMeter) -> tuple[Workload, Any, Any]:
    """The script's model with the meter appended, then Fleet's PS passes. Returns the workload,
    the program to train (Fleet replaces it: loss.block.program) and the startup program."""
    import paddle
    from paddle.distributed import fleet
    with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()), Quiet():
        paddle.seed(cfg.seed)
        work = build(cfg)
        meter.auc_stats = work.auc_stats
        # rows are counted on the last input (the label slot), units on units_var when given
        watched = [work.inputs[-1], work.loss] + ([work.units_var] if work.units_var is not None else [])
        paddle.static.py_func(func=lambda *tensors: meter(*tensors), x=watched, out=None)  # needs a function
        strategy = paddle26.strategy_for(cfg, work.optimizer, paddle.static.default_main_program())
        fleet.distributed_optimizer(work.optimizer, strategy).minimize(work.loss)
        return work, work.loss.block.program, paddle.static.default_startup_program()


def attempt(action: Callable, *args: Any) -> tuple[Any, Optional[str]]:
    """(result, None), or (None, one-line problem) for the errors a worker reports to the others."""
    try:
        return action(*args), None
    except (ValueError, OSError) as err:
        return None, str(err)


class WorkerJob:
    """This worker's part of the job: who it is, how it talks to the others, how it ends."""

    def __init__(self, bench: run.Run, role: roles.Role) -> None:
        from paddle.distributed import fleet
        self.bench, self.cfg, self.role = bench, bench.cfg, role
        self.index, self.workers = fleet.worker_index(), fleet.worker_num()
        self.gloo = gloo.Gloo(self.index, self.workers)
        self.placement = role.placement(self.index)
        self.scratch = scratch.for_process()
        self.zero = (0.0, 0.0)  # (perf_counter, wall ms) just after the barrier before training (traces)

    def fail_together(self, problem: Optional[str], store: bool = True) -> bool:
        """Share this worker's problem (None: none) with all workers. When any worker has one, all
        log every one, worker 0 stores the failed run (with `store`), and the job ends cleanly: True."""
        errors = self.gloo.agree_on_errors(problem)
        if not errors:
            return False
        for line in errors:
            say(f"error: {line}")
        if store:
            self.bench.store_failure(self.placement, "; ".join(errors))
        self.stop_client()
        self.stop()
        return True

    def stop_client(self) -> None:
        """Every worker finalizes its client (the async communicator's threads flush and end), and
        all meet: the servers are idle from here on."""
        from paddle.distributed import fleet
        with Quiet():
            fleet.stop_worker()
        self.gloo.barrier()

    def stop(self) -> None:
        """End the job once the clients are stopped: worker 0 sends the stop command to every
        server (fleet.stop_worker alone never does, so servers would serve forever under the new
        launcher) and waits for them to leave, so the legacy launcher, which kills servers once
        workers exit, finds them already gone."""
        if self.index == 0:
            paddle26.stop_servers()
            if not gloo.wait_ports(self.role.servers, up=False, deadline_s=30):
                say("warning: servers still accept connections 30 s after the stop request")


def start_client(cfg: PSConfig, program: Any, startup: Any) -> tuple[Any, set, list, list, list]:
    """The executor, the startup program run and this worker's PS client started; the client's threads
    (the communicator's and brpc's: ps/commthread.py); the variables checked (paddle26.checked_state)
    and their digests before the client started (worker 0's are what it pushes) and after (what
    came back from the servers)."""
    import paddle
    from paddle.distributed import fleet
    checked = paddle26.checked_state(program, startup, cfg.mode)
    exe = paddle.static.Executor(paddle.CPUPlace())
    with Quiet(), paddle26.init_deadline(cfg.init_timeout_s):
        exe.run(startup)
        before, pushed = commthread.threads(), paddle26.digests(checked)
        fleet.init_worker()
        return exe, commthread.threads() - before, checked, pushed, paddle26.digests(checked)


def start_up_problem(job: WorkerJob, checked: list[str], pushed: list, held: list) -> Optional[str]:
    """This worker's parameters after start-up unlike worker 0's before it pushed them: the servers
    did not hand back what they were given (seen once in a fresh clone's CI, a GEO job of 4
    servers on a loaded machine: AUC 0.49, its loss never fell; 27 runs beside busy loops could not
    repeat it), so the job would train from something else and its figures would not be the
    model's. Every worker compares its own against worker 0's; a start-up failure, run again."""
    first = job.gloo.gather(pushed if job.index == 0 else [0.0] * len(pushed))[0]
    wrong = [i for i, name in enumerate(checked) if held[2 * i:2 * i + 2] != first[2 * i:2 * i + 2]]
    if not wrong:
        return None
    i = wrong[0]
    return (f"{START_UP_PARAMETERS} {checked[i]} (and {len(wrong) - 1} more) is not what worker 0 pushed "
            f"(sum {first[2 * i]:.7g}, sum of squares {first[2 * i + 1]:.7g}; this worker holds "
            f"{held[2 * i]:.7g}, {held[2 * i + 1]:.7g})")


def run_worker(bench: run.Run, role: roles.Role, build: Callable, files: list, first_error: Callable) -> int:
    job = WorkerJob(bench, role)
    cfg = bench.cfg
    gloo.wait_ports(role.servers, up=True, deadline_s=600)  # then Paddle's own wait passes at once
    meter = StepMeter(cfg, job.index)
    work, main_program, startup = build_programs(cfg, build, meter)
    meter.unit = bench.unit_for(work)
    marks = Marks(keep_spans=bench.trace is not None)
    if cfg.measure.breakdown:
        instrument(main_program, marks, work.inputs[-1])  # the step's parts (ps/marks.py)
    # the probe built before the client and the data: seconds before its first edge (speed.Probe)
    probe = prober(job)
    exe, client_tids, *state = start_client(cfg, main_program, startup)
    if job.fail_together(start_up_problem(job, *state), store=False):
        return 1  # nothing measured: not a run to store (fleetbench launch runs the job once more)
    mine, counts_path = data.shard(files, job.index, job.workers), job.scratch / "counts.jsonl"
    loaded, problem = attempt(data.load, cfg, work, mine, first_error, counts_path)
    if job.fail_together(problem):
        return 1
    dataset, rows_per_pass, load_s = loaded
    meter.total_hint = cfg.passes * -(-rows_per_pass // cfg.batch_size)  # for the log lines only
    say(f"worker {job.index}/{job.workers} mode {cfg.mode} dataset {cfg.dataset} threads {cfg.data.num_workers} "
        f"omp {fleetbench.threads_info()['omp_num_threads']} files {' '.join(str(f) for f in mine)}")
    server_pids = servers.find(role.servers, dict(os.environ))
    before = probed(job, probe)  # every worker, before any trains
    meter.attach(marks, [server_pids.get(e) for e in role.servers], client_tids)
    passes = train(job, meter, lambda: paddle26.train_pass(exe, main_program, dataset, cfg.data.num_workers,
                                                          job.scratch.path))
    mine_figures, problem = attempt(meter.finish, run.peak_memory_mib("cpu"))
    if job.fail_together(problem):  # a gather: every worker's passes are over
        return 1
    extra, problem = attempt(work.after_training) if work.after_training and job.index == 0 else ({}, None)
    if job.fail_together(problem):
        return 1
    # The after edge once every client has stopped: an async worker's communicator kept sending
    # (and its server serving) after the last pass, and the probe read slower there.
    job.stop_client()
    after = probed(job, probe)
    mine_figures.probe = metrics.probe_row(before, after)
    say(metrics.rank_line(job.index, mine_figures))
    job.stop()  # before the record: a stopped server's probe is its after-edge
    server_probes = servers.collect_probes(server_pids, SERVER_PROBE_WAIT_S) if probe is not None else {}
    return report(job, work, meter, mine_figures, {"pipe": data.read_pipe_counts(counts_path), "load_s": load_s,
                                                   "passes": passes, "extra": extra, "marks": marks,
                                                   "server_probes": server_probes, "server_pids": server_pids})


def train(job: WorkerJob, meter: StepMeter, one_pass: Callable[[], None]) -> int:
    """Every pass, all workers starting together; the passes run. With measure.window_s, passes go
    on past `passes` until every worker's window has lasted that long: whole passes, because
    train_from_dataset cannot stop inside one (the window overshoots by less than a pass)."""
    job.gloo.barrier()  # every worker starts its first pass together
    meter.begin()
    job.zero = (meter.timer.window_start, time.time() * 1000)
    done = 0
    with Quiet():
        while done < job.cfg.passes or (done < MAX_PASSES and window_short(job, meter)):
            one_pass()
            done += 1
    return done


def window_short(job: WorkerJob, meter: StepMeter) -> bool:
    """Some worker's measured window is shorter than measure.window_s (all workers ask together,
    after the same pass, so they agree on running one more)."""
    if job.cfg.measure.window_s <= 0:
        return False
    return min(row[0] for row in job.gloo.gather([meter.window_so_far_s()])) < job.cfg.measure.window_s


def prober(job: WorkerJob) -> Optional[Callable[[], list]]:
    """The machine-speed probe (machine/speed.py), the workers of a machine in turn; None when off."""
    return speed.in_turn("cpu", job.gloo.gather, job.index, job.gloo.barrier) if job.cfg.measure.probe else None


def probed(job: WorkerJob, probe: Optional[Callable[[], list]]) -> Optional[list]:
    """The probe's figures once every worker is here (None without one). The servers are idle then
    (no worker trains), so the probe on a node they share sees the machine."""
    if probe is None:
        return None
    job.gloo.barrier()
    return probe()


def report(job: WorkerJob, work: Workload, meter: StepMeter, mine: metrics.RankFigures, more: dict) -> int:
    """Reduce every worker's figures (the standard ones, and the PS ones: pipe counts, load time,
    log loss, AUC); worker 0 stores the record. The exit code: 1 when the store failed."""
    import numpy as np
    totals = metrics.reduce(mine, job.gloo)
    valid, invalid, loss_sum = job.gloo.sum([more["pipe"].get("valid", 0), more["pipe"].get("invalid", 0),
                                             meter.loss_sum])
    (load_s,) = job.gloo.max([more["load_s"]])
    ps_figures = ps_extra(job, meter, mine, more)
    auc = None
    if work.auc_stats:  # the AUC buckets' change over the measured window, summed over workers
        end = meter.snapshot_auc()
        start = meter.auc_start or [np.zeros_like(a) for a in end]
        auc = auc_metric.from_buckets(*(job.gloo.sum((e - s).reshape(-1)) for e, s in zip(end, start)))
    if job.index != 0:
        return 0
    figures = metrics.standard(totals, meter.unit, job.workers, job.cfg.warmup_steps,
                               threads=fleetbench.threads_info(),
                               probe=speed.DEFINITION if job.cfg.measure.probe else None)
    figures.update(examples=int(totals.samples), valid_lines=int(valid), invalid_lines=int(invalid),
                   load_s=load_s, passes=more["passes"], workers=job.workers, **ps_figures, **more["extra"])
    if work.loss_is_logloss:
        figures["logloss"] = loss_sum / max(totals.samples, 1)
    if auc is not None:
        figures["auc"] = float(auc)
    say(f"throughput {figures['throughput']:.1f} {meter.unit} over {job.workers} workers"
        + (f" auc {auc:.4f}" if auc is not None else "") + f" invalid_lines {figures['invalid_lines']}")
    return job.bench.store_result(job.placement, figures)  # last: its summary line ends the run's output


def ps_extra(job: WorkerJob, meter: StepMeter, mine: metrics.RankFigures, more: dict) -> dict:
    """The PS record's step_breakdown, its workers' and servers' probe figures (ps_probe) and, with
    --trace, the trace files (every worker calls it together)."""
    marks, endpoints = more["marks"], job.role.servers
    threads = job.cfg.data.num_workers
    out = {}
    if job.cfg.measure.breakdown:  # (a gather too)
        row = stepparts.row(marks.totals, threads, mine.steps, mine.elapsed_s, meter.client_cpu)
        out["step_breakdown"] = stepparts.block(row, meter.server_cpu, mine.elapsed_s, job.gloo, endpoints, threads)
    if job.cfg.measure.probe:  # (a gather: every worker has read the servers' files once it returns)
        out["ps_probe"] = stepparts.probes(job.gloo, mine.probe, endpoints, more["server_probes"])
        servers.forget(more["server_pids"])
    if job.bench.trace:
        warmup = job.cfg.warmup_steps if mine.warmup_steps is None else mine.warmup_steps
        out["trace_files"] = write_trace(job, marks, out["step_breakdown"]["ranks"][job.index], warmup)
    return out


def write_trace(job: WorkerJob, marks: Marks, breakdown: dict, warmup_steps: int) -> list[str]:
    """This worker's Chrome trace (train/trace.py's format): its measured steps and their parts,
    one track per trainer thread; zero is its clock just after the barrier before the first pass.
    Every worker calls it together (rank 0's wall clock names the run's files)."""
    from fleetbench.train import trace
    zero, zero_wall_ms = job.zero
    first = job.gloo.gather([zero_wall_ms])[0][0]
    names = [os.path.abspath(os.path.join(job.bench.trace, trace.file_name(job.bench.name, first, w)))
             for w in range(job.workers)]
    steps: dict = {}
    for _, start, end, step, _ in marks.spans:
        low, high = steps.get(step, (start, end))
        steps[step] = (min(low, start), max(high, end))
    main = marks.spans[0][4] if marks.spans else 0
    about = {"benchmark": job.bench.name, "mode": job.cfg.mode, "rank": job.index, "world_size": job.workers,
             "zero_wall_ms": zero_wall_ms, "clock": "microseconds since this worker passed the barrier "
             "before its first pass", "breakdown": breakdown}
    doc = trace.document(trace.events([(s, a, b) for s, (a, b) in sorted(steps.items())], marks.spans, job.index,
                                      zero, main, warmup_steps), about)
    trace.write(names[job.index], doc)
    return names


def serve(cfg: PSConfig, build: Callable) -> None:
    """A server: the same program (its tables come from it), served until worker 0 says stop. The
    speed probe just before serving and just after (ps/servers.py hands its figures over)."""
    from paddle.distributed import fleet
    build_programs(cfg, build, StepMeter(cfg, -1))
    probe = speed.Probe() if cfg.measure.probe else None
    held = servers.hand_over() if probe is not None else None
    with Quiet():
        fleet.init_server()
    if probe is not None:
        servers.write_probe("before", probe.measure())
    fleet.run_server()  # returns when worker 0 sends the stop command
    if probe is not None:
        servers.write_probe("after", probe.measure())
        servers.wait_read(SERVER_PROBE_HOLD_S)
        held.close()
    # Leave at once: the legacy launcher terminates servers as soon as the workers are gone, and a
    # slow interpreter teardown would be cut short by its SIGTERM. (The scratch reaper cleans up.)
    sys.stdout.flush()
    os._exit(0)


def main(script: str, cls: type, build: Callable, data_files: Callable, first_error: Callable,
         argv: list[str] | None = None) -> None:
    """`script` is the calling script's path (`__file__`): its registry entry names the run.
    `data_files(cfg) -> [paths]` resolves data.path (or makes synthetic data);
    `first_error(paths) -> "file:line: reason" | None` serves data.strict."""
    bench = run.start(script, cls, "ps", argv, checks=[lambda cfg: check_data(cfg, data_files), check_paddle, check_tmpdir])
    if bench.check_only:
        return
    try:
        role = roles.role_from_env()
        files = data.check_names(data_files(bench.cfg))
    except ValueError as err:  # ConfigError, or a data reader's one-line error
        config.exit_config_error(bench.name, err)
    except OSError as err:
        config.exit_config_error(bench.name, f"{err.filename}: {err.strerror}")
    roles.set_threads(bench.cfg, role)
    paddle26.quiet_environment()
    with contextlib.redirect_stderr(io.StringIO()):  # paddle warns about OMP_NUM_THREADS > 1 we chose
        import paddle
    try:
        capability.check("ps", bench.cfg)  # see check_paddle
    except config.ConfigError as err:
        config.exit_config_error(bench.name, err)
    from paddle.distributed import fleet
    paddle.enable_static()
    paddle26.import_http_server_in(scratch.for_process().subdir("http"))
    store = paddle26.rendezvous_to_wait_for(role.role, role.servers, os.environ)
    if store:  # bounded: past it Paddle's own wait goes on, and its failure is the one reported
        gloo.wait_ports([store], up=True, deadline_s=bench.cfg.init_timeout_s)
    with Quiet():
        fleet.init(log_level="WARNING")
    if role.role == "server":
        serve(bench.cfg, build)
    code = run_worker(bench, role, build, files, first_error)
    scratch.for_process().close()
    sys.stdout.flush()
    if code:
        sys.exit(code)


def check_paddle(cfg: PSConfig) -> None:
    """The installed Paddle can run parameter-server jobs (ConfigError naming it otherwise). Runs
    under --check, which `fleetbench launch` and sweeps run before launching anything; a process
    the launcher started with a role checks in main() instead, once its threads are chosen
    (importing paddle earlier would fix OpenMP's thread count)."""
    if not (os.environ.get("TRAINING_ROLE") or os.environ.get("PADDLE_ROLE")):
        capability.check("ps", cfg)


# multiprocessing's socket for Paddle's gloo start-up: $TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, an
# AF_UNIX path of at most 107 bytes
MANAGER_SOCKET_TAIL = len("/pymp-XXXXXXXX/listener-XXXXXXXX")
MAX_TMPDIR_BYTES = 107 - MANAGER_SOCKET_TAIL


def check_tmpdir(cfg: PSConfig) -> None:
    """Paddle 2.6.2's parameter-server start-up (the gloo role maker) opens a multiprocessing
    Manager in the temporary directory; past MAX_TMPDIR_BYTES it fails with "AF_UNIX path too long"
    and then "coordinator address is null" in every rank's log. Said here, before launch."""
    tmp = tempfile.gettempdir()
    if len(os.fsencode(tmp)) > MAX_TMPDIR_BYTES:
        raise config.ConfigError(f"the temporary directory {tmp} (TMPDIR) is {len(os.fsencode(tmp))} bytes long: "
                                 f"Paddle's parameter-server start-up needs at most {MAX_TMPDIR_BYTES} (its "
                                 f"multiprocessing socket lives there); set TMPDIR to a shorter directory")


def check_data(cfg: PSConfig, data_files: Callable) -> None:
    """Under --check and before launch: a given data path must list files with safe names
    (synthetic data is made later, by the job)."""
    if cfg.data.path is not None:
        data.check_names(data_files(cfg))


def sparse_table_rows(name: str) -> Any:
    """The servers' sparse table of parameter `name`, every row, on this worker (see paddle26)."""
    return paddle26.sparse_table_rows(name, scratch.for_process().subdir("table"))
