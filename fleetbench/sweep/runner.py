"""`fleetbench sweep FILE.yaml | --preset NAME`: a matrix of benchmark runs, one at a time.

The sweep file and its cells: fleetbench.sweep.sweepfile. Every cell's config is resolved with
the benchmark's own `--check` before anything runs (on real hosts, a collective cell's on its
nodes, with their devices: fleetbench.hosts.nodecheck), so a bad key fails the sweep at once,
naming it; so does a results file that cannot be written. Cells whose repeats are already in the results
file are skipped, which is how an interrupted sweep resumes. Each cell's repeats run in turn, or
interleaved in rounds (--interleave: fleetbench.sweep.order decides, from counts). A failed run is stored (error set)
and the sweep goes on; failed runs are run again on resume. Each run is a supervised job
(fleetbench.job.paddle_launch), with the same fault reports as `fleetbench launch`. Network cells and
sweeps on hosts start one launcher per node through an executor (fleetbench.hosts.remote).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from types import FrameType
from typing import NoReturn, TextIO

from fleetbench import cmdline
from fleetbench.emulate import netem, sshd
from fleetbench.hosts import executors, remote
from fleetbench.hosts.hostlist import HostsError
from fleetbench.job import failure, paddle_launch, preflight
from fleetbench.machine import env as machine_env
from fleetbench.machine import speed
from fleetbench.measure import contract, registry, timing
from fleetbench.measure.repeats import aggregate
from fleetbench.store import results
from fleetbench.sweep import adaptive, order
from fleetbench.sweep.summary import Tally, cell_extra, duration, ok_line, progress_line, stability_lines, summary_table
from fleetbench.sweep.sweepfile import (
    METHOD_KEY,
    PRESET,
    REPO_ROOT,
    SWEEP_DIR,
    Cell,
    SweepError,
    cell_key,
    expand,
    load_spec,
    planned_network,
    record_key,
    record_paddle,
    sweep_path,
    untraced,
)


# ----------------------------------------------------------------------------------------------
# Running


class Interrupted(Exception):
    pass


def _raise_interrupt(sig: int, _frame: FrameType | None) -> NoReturn:
    raise Interrupted(signal.Signals(sig).name)


class Cluster:
    """The emulated cluster for network cells: brought up per profile, down at the end if we made it."""

    def __init__(self, prefix: str = netem.DEFAULT_PREFIX, subnet: str | None = None) -> None:
        self.prefix, self.subnet, self.ours, self.state = prefix, subnet, False, None

    def ensure(self, cell: Cell) -> dict:
        problem = netem.requirements_problem()
        if problem:
            raise netem.ClusterError(problem)
        existing = netem.load_state(self.prefix)
        if existing and existing["created"] and len(existing["layout"]["nodes"]) != cell.nodes and self.ours:
            # The node sshds first: a process outlives its deleted namespace, and `sshd.up` would
            # take the old pid for a server of the new node (every ssh then refused).
            sshd.down(self.prefix)
            netem.down(self.prefix)
            existing = None
        if not (existing and existing["created"]):
            self.ours = True
        self.state = netem.up(cell.nodes, netem.shaping_from(cell.network), prefix=self.prefix, subnet=self.subnet)
        return self.state

    def close(self) -> None:
        if self.ours:
            sshd.down(self.prefix)  # its servers live in the namespaces: before they go
            netem.down(self.prefix)
            self.ours = False


def shared_threads(cell: Cell) -> int:
    """OpenMP threads per process when emulated nodes share this machine's cores: an equal share
    (each node's launcher alone would give each of its processes all the cores)."""
    import fleetbench

    procs = cell.servers + cell.workers if cell.mode == "ps" else cell.nodes * cell.devices_per_node
    return max(1, fleetbench.usable_cores() // procs)


def emulated_env(cell: Cell, base_env: dict, network: dict) -> dict:
    """The environment of a run on the emulated cluster: its network, and an equal share of this
    machine's cores as threads unless the user chose a count."""
    env = paddle_launch.child_env(base_env, contract.RankContract(network=network).to_env())
    if contract.RankContract.from_env(env).threads is None:
        env.update(contract.RankContract(
            threads=str(shared_threads(cell)),
            threads_by="fleetbench sweep: equal share of cores across emulated nodes").to_env())
    return env


def local_launch(cell: Cell, log_dir: str, results_path: str, base_env: dict) -> list[paddle_launch.NodeLaunch]:
    flags = (["--server_num", str(cell.servers), "--trainer_num", str(cell.workers)] if cell.mode == "ps"
             else ["--nproc_per_node", str(cell.devices_per_node)])
    env = paddle_launch.child_env(base_env, contract.RankContract(nodes=1, launch=executors.local_block()).to_env())
    return [paddle_launch.NodeLaunch.paddle(flags, log_dir, cell.script, cell.script_args(results_path), env)]


class Sweep:
    def __init__(self, cells: list[Cell], results_path: str, log_root: str, *, out: TextIO = sys.stdout,
                 cluster_prefix: str = netem.DEFAULT_PREFIX, hosts: remote.HostOptions | None = None,
                 cluster_subnet: str | None = None, paddle: str | None = None,
                 policy: adaptive.Policy | None = None) -> None:
        self.cells, self.results_path, self.log_root, self.out = cells, os.path.abspath(results_path), log_root, out
        self.paddle = paddle  # the Paddle version the runs use; None: not known here (remote Python)
        self.cluster = Cluster(cluster_prefix, cluster_subnet)
        self.hosts = hosts or remote.HostOptions()
        self.configs = {}
        self.failed_runs = 0
        self.policy = policy or adaptive.Policy()  # until-stable repeats, warm-up runs
        self.warmed: set[tuple] = set()
        self.cuda_build = False  # the local Paddle is a CUDA build: emulated-network cells are skipped
        self.trace_root: str | None = None  # --trace: each measured run's traces in a directory of their own
        self.skipped: list[tuple[int, str, str]] = []  # (cell number, label, why): said again at the end

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def resolve_configs(self, env: dict) -> None:
        """Every cell's config via the benchmark's --check; errors name the cell, before any run. A
        collective cell on real hosts is checked on its nodes, as `fleetbench launch` does (remote.
        check_cell: devices, ranks and --check there, once per shape): the head need not have GPUs."""
        checked = set()
        for i, cell in enumerate(self.cells, start=1):
            key, on_nodes = (cell.script, cell.preset, cell.sets), self.hosts.real_hosts() and remote.on_nodes(cell)
            shape = key + ((cell.nodes, cell.counts, cell.devices_per_node) if on_nodes else ())
            try:
                if on_nodes and shape not in checked:
                    self.configs[key] = remote.check_cell(self.hosts, cell, self.results_path, env)
                elif key not in self.configs:
                    self.configs[key] = preflight.check_config(cell.script, cell.script_args(self.results_path)[:-2], env)
            except (preflight.LaunchError, HostsError) as e:
                raise SweepError(f"cell {i} ({cell.label()}): {e}") from None
            checked.add(shape)

    def config(self, cell: Cell) -> dict:
        return self.configs[(cell.script, cell.preset, cell.sets)]

    def runs_of(self, cell: Cell, records: list[dict] | None = None, ok_only: bool = True) -> list[dict]:
        """The cell's stored runs under this sweep's Paddle. Another version's runs of the same cell
        in the same file are another experiment: neither counted as done nor summarised here."""
        if records is None:
            records = results.load(self.results_path) if os.path.exists(self.results_path) else []
        key = cell_key(cell, self.config(cell))
        return [r for r in records if record_key(r) == key and (r.get("error") is None or not ok_only)
                and (self.paddle is None or record_paddle(r) == self.paddle)]

    def plan(self) -> list[tuple[Cell, int]]:
        recs = results.load(self.results_path) if os.path.exists(self.results_path) else []
        return [(cell, min(len(self.runs_of(cell, recs)), self.policy.limit(cell))) for cell in self.cells]

    def finished(self, cell: Cell) -> bool:
        runs = self.runs_of(cell)
        return self.policy.finished(cell, [r["metrics"]["throughput"] for r in runs], adaptive.quiet_flags(runs))

    def run(self, base_env: dict) -> list[dict]:
        started = time.monotonic()
        plan = self.plan()
        todo = sum(max(0, c.repeats - done) for c, done in plan)
        at_least = "at least " if any(self.policy.adaptive(c) for c in self.cells) else ""
        self.say(f"sweep: {len(plan)} cells, {at_least}{todo} runs to do "
                 f"({sum(d for _, d in plan)} done earlier), results in {self.results_path}")
        if self.policy.interleave and len(plan) > 1:
            self.say(order.rounds_text([d for _, d in plan], [self.policy.limit(c) for c, _ in plan]))
        if todo:  # no stored run on a machine that has not settled (its first runs read slow)
            self.settle_machine()
        tally = Tally(started, todo)
        try:
            self.take_turns(plan, base_env, tally)
        finally:
            self.cluster.close()
        self.say(f"sweep finished in {duration(time.monotonic() - started)}: {tally.runs} runs, "
                 f"{self.failed_runs} failed" + (f", {len(self.skipped)} cell{'s' * (len(self.skipped) > 1)} skipped" if self.skipped else ""))
        for i, label, why in self.skipped:  # at the end too: the run's first lines are long gone by now
            self.say(f"skipped cell {i}/{len(self.cells)} {label}: {why}")
        return self.summary()

    def settle_machine(self) -> None:
        """The sweep's warm-up: the speed probe until it settles (machine/speed.settle), said."""
        self.say(speed.settle_text(*speed.settle(speed.Probe(), timing.SETTLE_PCT, MACHINE_WARMUP_TRIES)))

    def take_turns(self, plan: list[tuple[Cell, int]], base_env: dict, tally: Tally) -> None:
        """Run the cells' repeats in the order sweep/order.py gives (all of a cell's before the
        next cell's, or interleaved in rounds); a cell is looked at on its first turn (finished
        earlier, or a network it cannot have: skipped; its warm-up run) and is over once finished
        or at its most runs."""
        n, turns = len(plan), [done for _, done in plan]
        open_, seen = [True] * n, [False] * n
        while (j := order.next_turn(turns, open_, self.policy.interleave)) is not None:
            i, cell = j + 1, plan[j][0]
            if not seen[j]:
                seen[j] = True
                if not self.first_turn(i, cell, turns[j], base_env):
                    open_[j] = False
                    continue
            turns[j] += 1
            self.say(progress_line(i, n, cell, turns[j], time.monotonic() - tally.started, tally.eta(),
                                   self.policy.limit(cell)))
            t0 = time.monotonic()
            self.run_one(i, cell, turns[j], dict(base_env, **self.policy.rank_env(cell, turns[j],
                                                                                self.config(cell).get("seed"))))
            tally.add(time.monotonic() - t0)
            if self.finished(cell) or turns[j] >= self.policy.limit(cell):
                open_[j] = False
                self.say_stop(i, n, cell)

    def first_turn(self, i: int, cell: Cell, done: int, base_env: dict) -> bool:
        """Whether `cell` (number i) runs at all in this sweep, said when not; its warm-up run."""
        if self.finished(cell):
            self.say(f"cell {i}/{len(self.cells)} {cell.label()}: {done}/{cell.repeats} done earlier, skipped")
            return False
        problem = self.network_problem(cell)
        if problem:
            self.say(f"cell {i}/{len(self.cells)} {cell.label()}: skipped ({problem})")
            self.skipped.append((i, cell.label(), problem))
            return False
        if done >= self.policy.limit(cell):  # at its maximum, not stable: nothing more to run
            self.say_stop(i, len(self.cells), cell)
            return False
        if self.trace_note(cell):
            self.say(f"cell {i}/{len(self.cells)} {cell.label()}: not traced ({self.trace_note(cell)})")
        self.warm_up(i, cell, base_env)
        return True

    def trace_note(self, cell: Cell) -> str | None:
        """Why this sweep runs `cell` without the trace --trace asked for (None: traced, or not asked)."""
        return untraced(cell, self.config(cell)) if self.trace_root else None

    def network_problem(self, cell: Cell) -> str | None:
        """Why an emulated-network cell cannot run here (None: it can, or it is no such cell)."""
        if not cell.network:
            return None
        if self.cuda_build:
            return EMULATED_ON_CUDA
        problem = netem.requirements_problem()
        return problem and f"{problem}; {ENABLE_NETWORK_CELLS['root' if os.geteuid() != 0 else 'tools']}"

    def say_stop(self, i: int, n: int, cell: Cell) -> None:
        """How a cell's until-stable repeats ended (nothing without the policy)."""
        if self.policy.adaptive(cell):
            runs = self.runs_of(cell)
            self.say(f"cell {i}/{n} {cell.label()}: {adaptive.verdict_text(self.policy.record_block(cell), runs)}")

    def warm_up(self, i: int, cell: Cell, base_env: dict) -> None:
        """One unrecorded run before the first measured run of a (benchmark, Paddle, shape): its
        record goes to a scratch file in its log directory, never to the results."""
        key = adaptive.warmup_key(cell, self.paddle)
        if not self.policy.warmup_run or key in self.warmed:
            return
        self.warmed.add(key)
        log_dir = os.path.join(self.log_root, f"cell{i:02d}-warmup-{time.strftime('%H%M%S')}")
        self.say(f"cell {i}/{len(self.cells)} {cell.label()}: warm-up run (not recorded)")
        limits = paddle_launch.Limits(timeout=cell.timeout, stall=cell.stall, startup=cell.startup)
        saved, self.results_path = self.results_path, os.path.join(os.path.abspath(log_dir), "warmup.jsonl")
        try:
            outcome = self.execute(cell, log_dir, base_env, limits)[0]
        except (netem.ClusterError, HostsError) as e:
            self.say(f"  -> warm-up could not set up the cluster: {e}")
            return
        finally:
            self.results_path = saved
        if outcome.status == "interrupted":
            raise Interrupted(outcome.detail)
        self.say(f"  -> warm-up {'done' if outcome.ok else 'FAILED: ' + outcome.detail} in "
                 f"{outcome.elapsed_s:.0f} s (logs: {log_dir})")

    def run_one(self, i: int, cell: Cell, repeat: int, base_env: dict) -> None:
        log_dir = os.path.join(self.log_root, f"cell{i:02d}-r{repeat}-{time.strftime('%H%M%S')}")
        limits = paddle_launch.Limits(timeout=cell.timeout, stall=cell.stall, startup=cell.startup)
        traced = dataclasses.replace(cell, trace=os.path.join(self.trace_root, os.path.basename(log_dir))) \
            if self.trace_root and not self.trace_note(cell) else cell
        try:
            outcome, network, launch = self.execute(traced, log_dir, base_env, limits)
        except (netem.ClusterError, HostsError) as e:
            self.failed_runs += 1
            self.say(f"  -> FAILED to set up the cluster: {e}")
            return
        if outcome.status == "interrupted":
            raise Interrupted(outcome.detail)
        runs, stored = self.runs_of(cell), results.job_record(log_dir, self.results_path) if outcome.ok else None
        at = next((k for k, r in enumerate(runs) if stored and r["id"] == stored["id"]), None)  # this cell's?
        if at is not None:
            self.say(ok_line(outcome.elapsed_s, stored, self.results_path) + adaptive.disturbed_text(runs, at))
            return
        if outcome.ok:  # finished, but the run stored nothing that matches the cell
            outcome = dataclasses.replace(outcome, status="failed",
                                          detail="the run finished without storing a matching result record")
        self.failed_runs += 1
        failure.store_failure(self.results_path, self.identity(cell, network, launch), outcome)
        self.say(f"  -> FAILED: {outcome.detail} (logs: {log_dir})")
        for line in outcome.report().splitlines()[1:]:
            self.say(f"     {line}")

    def execute(self, cell: Cell, log_dir: str, base_env: dict,
                limits: paddle_launch.Limits) -> tuple[failure.Outcome, dict | None, dict]:
        """Run one repeat of `cell`: (Outcome, the network it ran on or None, its launch block)."""
        if not (cell.network or self.hosts.real_hosts()):
            outcome = paddle_launch.supervise(
                lambda dir_, extra, _job_id: local_launch(cell, dir_, self.results_path, dict(base_env, **extra)),
                log_dir, limits, say=self.say)
            return outcome, None, executors.local_block()
        network, env = None, base_env
        if cell.network:
            state = self.cluster.ensure(cell)
            network = netem.network_dict(netem.Shaping(**state["shaping"]), cell.nodes, state["not_applied"])
            env = emulated_env(cell, base_env, network)
            ex = remote.emulated_executor(self.hosts, state, self.cluster.prefix, self.say)
        else:
            ex = None
        work = remote.cell_job(cell, self.results_path)
        ex = ex or remote.host_executor(self.hosts, cell.nodes, work.counts, check_slots=cell.mode != "ps")
        outcome = remote.run_job(ex, work, log_dir, env, limits, self.results_path, say=self.say)
        return outcome, network, ex.launch_block(work)

    def identity(self, cell: Cell, network: dict | None, launch: dict | None = None) -> contract.RunIdentity:
        """What a failure record of this cell says the run was."""
        config = self.config(cell)
        return contract.RunIdentity(
            benchmark=cell.benchmark, mode=cell.mode, method=str(config.get(METHOD_KEY[cell.mode]) or cell.method
                                                                 or "unknown"),
            preset=cell.preset, config=config, nodes=cell.nodes, devices_per_node=max(1, cell.world_size // cell.nodes),
            world_size=cell.world_size, network=network or planned_network(cell), launch=launch)

    def summary(self) -> list[dict]:
        """mean ± std per sweep cell (aggregate.aggregate over that cell's runs), efficiency against
        a baseline among them (aggregate.add_efficiency)."""
        recs = results.load(self.results_path) if os.path.exists(self.results_path) else []
        rows, seen = [], set()
        for cell in self.cells:
            key, runs = cell_key(cell, self.config(cell)), self.runs_of(cell, recs, ok_only=False)
            if key in seen or not runs:
                continue
            seen.add(key)
            for agg in aggregate.aggregate(runs):
                rows.append(dict(agg, sweep_extra=cell_extra(cell)))
        rows = aggregate.add_efficiency(rows)
        self.say(summary_table(rows))
        for line in stability_lines(rows):
            self.say(line)
        return rows


# ----------------------------------------------------------------------------------------------
# CLI


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench sweep", description="Run a matrix of benchmark cells.")
    p.add_argument("file", nargs="?", type=cmdline.INPUT_FILE, help="sweep file (YAML)")
    p.add_argument("--preset", type=PRESET, help=f"a sweep from {os.path.relpath(SWEEP_DIR, REPO_ROOT)}/NAME.yaml")
    p.add_argument("--results", default=registry.DEFAULT_RESULTS, type=results.STORE, help="results file (default %(default)s)")
    p.add_argument("--repeats", type=cmdline.COUNT, help="override every cell's repeats")
    p.add_argument("--log-dir", type=cmdline.OUTPUT_DIR, help="where run logs go (default log/sweep-<name>)")
    p.add_argument("--cluster-name", default=netem.DEFAULT_PREFIX, type=netem.NAME, help="emulated cluster prefix (default fb)")
    p.add_argument("--cluster-subnet", type=netem.SUBNET,
                   help="its subnet (default: the first 10.77.N.0/24 no route or namespace here uses)")
    remote.add_arguments(p)
    adaptive.add_arguments(p)
    p.add_argument("--trace", type=cmdline.OUTPUT_DIR, metavar="DIR",
                   help="each run writes a Chrome trace per rank into DIR/<its log directory's name> (collective "
                        "cells, and parameter-server cells with measure.breakdown true; the others say why not)")
    p.add_argument("--dry-run", action="store_true", help="resolve and list the cells, run nothing")
    return p


# Emulated nodes share one machine's devices and are given none by number, so on a CUDA build every
# node would take GPUs 0..K-1, and NCCL would bypass the shaped link: such cells are
# skipped with this reason, the others run (so `make demo` works on a GPU host).
# The sweep's warm-up: the speed probe (~0.1-0.3 s) until it settles, at most this many times (2-5 s),
# on the machine the sweep runs on (remote nodes warm up in their first run)
MACHINE_WARMUP_TRIES = 15
# The one command that lets an emulated-network cell run, by what is missing (make demo says the first).
ENABLE_NETWORK_CELLS = {"root": "run the sweep as root to include it (make demo: sudo make demo)",
                        "tools": "install iproute2 to include it (as root: make deps-demo)"}
EMULATED_ON_CUDA = ("emulated nodes on a CUDA build would share this machine's GPUs and NCCL would go around the "
                    "shaped link; run network cells with a CPU build of Paddle, docs/guide/gpu.md")


def local_paddle() -> dict:
    """This Python's Paddle ({} without one), which runs the ranks unless --remote-python says otherwise."""
    return machine_env.read_paddle()[0] or {}


def prepare(args: argparse.Namespace) -> Sweep:
    """The sweep to run, every input checked (one line naming the file or flag if not)."""
    path = sweep_path(args)
    spec = load_spec(path)
    if args.repeats is not None:
        spec = dict(spec, repeats=args.repeats, cells=[{k: v for k, v in c.items() if k != "repeats"}
                                                       for c in spec["cells"]])
    hosts = remote.from_sweep(remote.from_namespace(args), spec, path)
    cells = expand(spec, path, on_hosts=hosts.real_hosts())
    if hosts.executor == "ssh" and not hosts.real_hosts() and not all(c.network for c in cells):
        raise SweepError("--executor ssh: cells without `network` need hosts (--hostfile or --hosts)")
    problem = remote.ssh_problem(hosts, emulated=any(c.network for c in cells))
    if problem:  # refused before any cell runs: running them another way would not be what was asked
        raise SweepError(problem)
    name = os.path.splitext(os.path.basename(path))[0]
    log_dir = args.log_dir or os.path.join("log", f"sweep-{name}")
    cmdline.check_output_dir(log_dir, "--log-dir")  # --results was checked by the parser
    local = {} if hosts.python else local_paddle()
    sweep = Sweep(cells, args.results, log_dir, cluster_prefix=args.cluster_name, hosts=hosts,
                  cluster_subnet=args.cluster_subnet, paddle=local.get("version"), policy=adaptive.policy(spec, args, path, cells))
    sweep.cuda_build = any(c.network for c in cells) and bool(local.get("compiled_with_cuda"))
    sweep.trace_root = os.path.abspath(args.trace) if args.trace else None
    sweep.resolve_configs(paddle_launch.child_env())
    return sweep


def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        sweep = prepare(args)
        if args.dry_run:
            plan = sweep.plan()
            for i, (cell, done) in enumerate(plan, start=1):
                notes = [f"will be skipped ({p})" for p in [sweep.network_problem(cell)] if p] + \
                    [f"not traced ({t})" for t in [sweep.trace_note(cell)] if t]
                print(f"cell {i}/{len(sweep.cells)} {cell.label()}: {', '.join([f'{done}/{cell.repeats} done', *notes])}")
            if sweep.policy.interleave and len(plan) > 1:
                print(order.rounds_text([d for _, d in plan], [sweep.policy.limit(c) for c, _ in plan]))
            return 0
        sweep.run(dict(os.environ))
        return 1 if sweep.failed_runs else 0
    except (cmdline.UserError, netem.ClusterError) as e:  # the sweep file, a path, the hosts, the cluster
        return cmdline.refused("fleetbench sweep", e)
    except results.StoreError as e:  # the store broke during the sweep: going on would lose results
        print(f"fleetbench sweep: error: {e}; runs stored before are kept, fix it and run the same "
              f"command again to resume", file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt) as e:
        print(f"fleetbench sweep: interrupted ({e or 'SIGINT'}); finished runs are stored, "
              f"run the same command again to resume", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, old_term)
