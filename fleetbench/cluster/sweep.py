"""`fleetbench sweep FILE.yaml | --preset NAME`: a matrix of benchmark runs, one at a time.

A sweep file lists cell groups; list values are axes, and a group expands to their product:

    repeats: 3                      # default 3; each repeat is one stored run
    cells:
      - benchmark: resnet50         # collective/resnet50.py (or parameter_server/<name>.py)
        preset: tiny
        devices_per_node: [1, 2]    # processes per node (collective)
      - benchmark: ctr
        preset: tiny
        method: [sync, async, geo]  # collective: config key `method`; PS: the PS mode key
        servers_workers: ["1/1", "2/2"]
      - benchmark: resnet50
        preset: tiny
        network: [1gbe, 10gbe]      # an emulated cluster per profile (root); nodes default to 2

Other cell keys: script, nodes, set (config overrides; list values are axes too), timeout, stall,
startup (seconds allowed before the first progress line; default: stall).
Every cell's config is resolved with the benchmark's own `--check` before anything runs, so a bad
key fails the sweep at once, naming it. A run's identity is `results.config_hash` of what makes it
the same cell (benchmark, preset, resolved config, mode, nodes, world size, network); cells whose
repeats are already in the results file are skipped, which is how an interrupted sweep resumes.
A failed run is stored (error set) and the sweep goes on; failed runs are run again on resume.
"""
import argparse
import dataclasses
import itertools
import json
import os
import random
import signal
import sys
import time

import yaml

from fleetbench.cluster import launch, netem
from fleetbench.measure import registry, results

REPO_ROOT = str(registry.REPO_ROOT)
SWEEP_DIR = str(registry.SWEEP_DIR)
METHOD_KEY = registry.METHOD_KEY
TOP_KEYS = {"description", "repeats", "timeout", "stall", "startup", "cells"}
CELL_KEYS = {"benchmark", "script", "mode", "preset", "devices_per_node", "nodes", "method", "servers_workers",
             "network", "set", "repeats", "timeout", "stall", "startup"}
DEFAULTS = {"repeats": 3, "timeout": 900.0, "stall": 300.0, "startup": None}  # startup None: = stall


class SweepError(ValueError):
    """A bad sweep file or option; one line naming the file and key."""


@dataclasses.dataclass(frozen=True)
class Cell:
    benchmark: str
    script: str
    mode: str
    preset: str
    sets: tuple
    method: str = None
    nodes: int = 1
    devices_per_node: int = 1
    servers: int = 0
    workers: int = 0
    network: str = None
    repeats: int = 3
    timeout: float = 900.0
    stall: float = 300.0
    startup: float = None

    @property
    def world_size(self):
        return self.workers if self.mode == "ps" else self.nodes * self.devices_per_node

    def extra_sets(self):
        """Config overrides other than the method (they tell cells of one shape apart)."""
        return [s for s in self.sets if not s.startswith(f"{METHOD_KEY[self.mode]}=")]

    def label(self):
        shape = (f"{self.servers}s/{self.workers}w" if self.mode == "ps"
                 else f"{self.nodes}x{self.devices_per_node}")
        extra = " ".join(self.extra_sets())
        parts = [self.benchmark, self.preset, self.mode, self.method or "", shape,
                 f"nodes={self.nodes}" if self.mode == "ps" and self.nodes > 1 else "",
                 f"net={self.network}" if self.network else "", extra]
        return " ".join(p for p in parts if p)

    def script_args(self, results_path):
        args = ["--preset", self.preset]
        for s in self.sets:
            args += ["--set", s]
        return args + ["--results", results_path]


# ----------------------------------------------------------------------------------------------
# Pure part: sweep files -> cells


def load_spec(path):
    try:
        with open(path) as f:
            spec = yaml.safe_load(f)
    except OSError as e:
        raise SweepError(f"{path}: cannot read sweep file ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("cells"), list) or not spec["cells"]:
        raise SweepError(f"{path}: expected a mapping with a non-empty list `cells`")
    unknown = set(spec) - TOP_KEYS
    if unknown:
        raise SweepError(f"{path}: unknown key {sorted(unknown)[0]!r} (expected {', '.join(sorted(TOP_KEYS))})")
    return spec


def find_script(benchmark, script=None, root=REPO_ROOT):
    """(path, family) of a registered benchmark; with `script:` a file of the benchmark's family
    (a variant of it); (None, None) when there is none."""
    bench = registry.BENCHMARKS.get(benchmark)
    if bench is None:
        return None, None
    if script:
        path = script if os.path.isabs(script) else os.path.join(root, script)
        return (path, bench.family) if os.path.exists(path) else (None, None)
    return str(bench.path), bench.family


def _axis(value):
    return value if isinstance(value, list) else [value]


def expand(spec, where="sweep", root=REPO_ROOT):
    """All cells of a sweep spec, in file order (raises SweepError naming where and the key)."""
    top = {k: spec.get(k, v) for k, v in DEFAULTS.items()}
    cells = []
    for gi, group in enumerate(spec["cells"], start=1):
        at = f"{where}: cells[{gi}]"
        if not isinstance(group, dict):
            raise SweepError(f"{at}: expected a mapping")
        unknown = set(group) - CELL_KEYS
        if unknown:
            raise SweepError(f"{at}: unknown key {sorted(unknown)[0]!r} (expected {', '.join(sorted(CELL_KEYS))})")
        if not isinstance(group.get("benchmark"), str):
            raise SweepError(f"{at}: `benchmark` must name one benchmark (e.g. resnet50)")
        script, mode = find_script(group["benchmark"], group.get("script"), root)
        if script is None:
            raise SweepError(f"{at}: no script for benchmark {group['benchmark']!r} "
                             f"(registered: {', '.join(registry.BENCHMARKS)})")
        mode = group.get("mode", mode)
        if mode not in METHOD_KEY:
            raise SweepError(f"{at}: mode {mode!r}: expected one of {', '.join(METHOD_KEY)}")
        sets = group.get("set") or {}
        if not isinstance(sets, dict):
            raise SweepError(f"{at}: `set` must be a mapping of config key -> value(s)")
        set_axes = [[f"{k}={_scalar(v)}" for v in _axis(vals)] for k, vals in sets.items()]
        axes = [_axis(group.get("preset", "full")), _axis(group.get("method")), _axis(group.get("network")),
                _axis(group.get("devices_per_node", 1)), _axis(group.get("servers_workers", "1/1")),
                _axis(group.get("nodes"))] + set_axes
        for preset, method, network, per_node, sw, nodes, *chosen in itertools.product(*axes):
            cells.append(_cell(at, group, top, script, mode, preset, method, network, per_node, sw, nodes, chosen))
    return cells


def _scalar(v):
    return json.dumps(v) if isinstance(v, bool) else str(v)


def _positive_int(at, key, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SweepError(f"{at}: {key} {value!r}: expected an integer >= 1")
    return value


def _cell(at, group, top, script, mode, preset, method, network, per_node, sw, nodes, chosen):
    if network is not None and network not in netem.PROFILES:
        raise SweepError(f"{at}: network {network!r}: expected one of {', '.join(netem.PROFILES)}")
    nodes = _positive_int(at, "nodes", nodes if nodes is not None else (2 if network else 1))
    if nodes > 1 and network is None:
        raise SweepError(f"{at}: nodes {nodes} on one machine needs a `network` profile (an emulated cluster)")
    servers = workers = 0
    if mode == "ps":
        try:
            servers, workers = (int(x) for x in str(sw).split("/"))
        except ValueError:
            raise SweepError(f"{at}: servers_workers {sw!r}: expected SERVERS/WORKERS like 2/2") from None
        _positive_int(at, "servers", servers), _positive_int(at, "workers", workers)
    sets = tuple(chosen)
    if method is not None:
        sets = (f"{METHOD_KEY[mode]}={method}",) + sets
    knobs = {k: group.get(k, top[k]) for k in DEFAULTS}
    _positive_int(at, "repeats", knobs["repeats"])
    for k in ("timeout", "stall", "startup"):
        if k == "startup" and knobs[k] is None:
            continue
        if not isinstance(knobs[k], (int, float)) or isinstance(knobs[k], bool) or knobs[k] <= 0:
            raise SweepError(f"{at}: {k} {knobs[k]!r}: expected seconds > 0")
    return Cell(group["benchmark"], script, mode, str(preset), sets, method, nodes,
                _positive_int(at, "devices_per_node", per_node), servers, workers, network,
                knobs["repeats"], float(knobs["timeout"]), float(knobs["stall"]),
                None if knobs["startup"] is None else float(knobs["startup"]))


def network_key(network):
    """The part of a network dict that makes runs comparable (what was asked for)."""
    if not network:
        return None
    return {"profile": network.get("profile"), "rate_gbit": network.get("rate_gbit"),
            "delay_ms": network.get("delay_ms_requested", network.get("delay_ms"))}


def run_key(benchmark, preset, config, mode, nodes, world_size, network):
    """results.config_hash of a run's identity; `runtime` (device, threads, versions the loop
    adds to the stored config) and what the network could not apply are not part of it."""
    config = {k: v for k, v in config.items() if k != "runtime"}
    return results.config_hash({"benchmark": benchmark, "preset": preset, "config": config, "mode": mode,
                                "nodes": nodes, "world_size": world_size, "network": network_key(network)})


def record_key(rec):
    return run_key(rec["benchmark"], rec.get("preset"), rec["config"], rec["mode"], rec["nodes"],
                   rec["world_size"], rec.get("network"))


def planned_network(cell):
    if not cell.network:
        return None
    return netem.network_dict(netem.shaping_from(cell.network), cell.nodes)


def cell_key(cell, config):
    return run_key(cell.benchmark, cell.preset, config, cell.mode, cell.nodes, cell.world_size,
                   planned_network(cell))


def duration(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_line(i, n, cell, repeat, elapsed, eta):
    eta_text = duration(eta) if eta is not None else "?"
    return (f"cell {i}/{n} {cell.label()} repeat {repeat}/{cell.repeats} | "
            f"elapsed {duration(elapsed)} ETA {eta_text}")


def cell_extra(cell):
    return " ".join(cell.extra_sets())


def summary_table(cells):
    """Text table of aggregated cells (results.aggregate/add_efficiency output)."""
    head = ("benchmark", "preset", "mode", "method", "network", "nodes", "dev/node", "world", "n",
            "throughput mean ± std", "unit", "eff", "failed", "set")
    rows = [head]
    for c in cells:
        mean = "-" if c["mean"] is None else f"{c['mean']:.2f} ± {c['std'] or 0:.2f}"
        eff = "-" if c.get("efficiency") is None else f"{c['efficiency']:.2f}"
        rows.append((c["benchmark"], c["preset"] or "-", c["mode"], c["method"], c["network"] or "-",
                     str(c["nodes"]), str(c["devices_per_node"]), str(c["world_size"]), str(c["n"] or 0),
                     mean, c["unit"] or "-", eff, str(c["failed"]), c.get("sweep_extra") or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


# ----------------------------------------------------------------------------------------------
# Running


class Interrupted(Exception):
    pass


def _raise_interrupt(sig, _frame):
    raise Interrupted(launch.signal_name(sig))


class Cluster:
    """The emulated cluster for network cells: brought up per profile, down at the end if we made it."""

    def __init__(self, prefix=netem.DEFAULT_PREFIX):
        self.prefix, self.ours, self.state = prefix, False, None

    def ensure(self, cell):
        problem = netem.requirements_problem()
        if problem:
            raise netem.ClusterError(problem)
        existing = netem.load_state(self.prefix)
        if existing and existing["created"] and len(existing["layout"]["nodes"]) != cell.nodes and self.ours:
            netem.down(self.prefix)
            existing = None
        if not (existing and existing["created"]):
            self.ours = True
        self.state = netem.up(cell.nodes, netem.shaping_from(cell.network), prefix=self.prefix)
        return self.state

    def close(self):
        if self.ours:
            netem.down(self.prefix)
            self.ours = False


def _free_port():
    # Inside namespaces we created every port is free; random keeps concurrent sweeps apart anyway.
    return random.randint(20000, 29999)


def shared_threads(cell):
    """OpenMP threads per process when emulated nodes share this machine's cores: an equal share
    (each node's launcher alone would give each of its processes all the cores)."""
    import fleetbench

    procs = cell.servers + cell.workers if cell.mode == "ps" else cell.nodes * cell.devices_per_node
    return max(1, fleetbench.usable_cores() // procs)


def node_launches(cell, state, log_dir, results_path, base_env):
    """One Paddle launcher per node, each inside its namespace (argument lists, no shell)."""
    layout = netem.Layout.from_dict(state["layout"])
    nodes = layout.nodes[:cell.nodes]
    network = netem.network_dict(netem.Shaping(**state["shaping"]), cell.nodes, state["not_applied"])
    args = cell.script_args(results_path)
    launches = []
    if cell.mode != "ps":  # collective and comm jobs launch alike
        master = f"{nodes[0].ip}:{_free_port()}"
        per_node = [["--master", master, "--nnodes", str(cell.nodes), "--nproc_per_node", str(cell.devices_per_node)]
                    for _ in nodes]
    else:
        # Servers and workers spread over the nodes in contiguous blocks (Paddle numbers a node's
        # trainers from its first endpoint in the list).
        def spread(total):
            return [total // cell.nodes + (i < total % cell.nodes) for i in range(cell.nodes)]
        servers = [[f"{n.ip}:{_free_port()}" for _ in range(k)] for n, k in zip(nodes, spread(cell.servers))]
        workers = [[f"{n.ip}:{_free_port()}" for _ in range(k)] for n, k in zip(nodes, spread(cell.workers))]
        flags = ["--servers", ",".join(sum(servers, [])), "--trainers", ",".join(sum(workers, [])),
                 "--gloo_port", str(_free_port())]
        per_node = [flags if (s or w) else None for s, w in zip(servers, workers)]
    for node, flags in zip(nodes, per_node):
        if flags is None:
            continue
        node_dir = os.path.join(log_dir, f"node{node.index}")
        cmd = ["ip", "netns", "exec", node.netns] + launch.paddle_command(
            flags + ["--host", node.ip], node_dir, cell.script, args)
        env = launch.child_env(base_env, {"GLOO_SOCKET_IFNAME": node.ifname, "POD_IP": node.ip,
                                          "FLEETBENCH_NODES": str(cell.nodes),
                                          "FLEETBENCH_NETWORK": json.dumps(network)})
        if "FLEETBENCH_OMP_THREADS" not in env:
            env.update(FLEETBENCH_OMP_THREADS=str(shared_threads(cell)),
                       FLEETBENCH_OMP_THREADS_BY="fleetbench sweep: equal share of cores across emulated nodes")
        launches.append(launch.NodeLaunch(cmd, node_dir, env, name=f"node{node.index}"))
    return launches, network


def local_launch(cell, log_dir, results_path, base_env):
    flags = (["--server_num", str(cell.servers), "--trainer_num", str(cell.workers)] if cell.mode == "ps"
             else ["--nproc_per_node", str(cell.devices_per_node)])
    cmd = launch.paddle_command(flags, log_dir, cell.script, cell.script_args(results_path))
    return [launch.NodeLaunch(cmd, log_dir, launch.child_env(base_env, {"FLEETBENCH_NODES": "1"}))]


class Sweep:
    def __init__(self, cells, results_path, log_root, out=sys.stdout, cluster_prefix=netem.DEFAULT_PREFIX):
        self.cells, self.results_path, self.log_root, self.out = cells, os.path.abspath(results_path), log_root, out
        self.cluster = Cluster(cluster_prefix)
        self.configs = {}
        self.failed_runs = 0

    def say(self, text):
        print(text, file=self.out, flush=True)

    def resolve_configs(self, env):
        """Every cell's config via the benchmark's --check; errors name the cell, before any run."""
        for i, cell in enumerate(self.cells, start=1):
            key = (cell.script, cell.preset, cell.sets)
            if key not in self.configs:
                try:
                    self.configs[key] = launch.check_config(cell.script, list(cell.script_args(self.results_path)[:-2]), env)
                except launch.LaunchError as e:
                    raise SweepError(f"cell {i} ({cell.label()}): {e}") from None

    def config(self, cell):
        return self.configs[(cell.script, cell.preset, cell.sets)]

    def done_counts(self):
        if not os.path.exists(self.results_path):
            return {}
        counts = {}
        for rec in results.load(self.results_path):
            if rec.get("error") is None:
                counts[record_key(rec)] = counts.get(record_key(rec), 0) + 1
        return counts

    def plan(self):
        counts = self.done_counts()
        return [(cell, min(counts.get(cell_key(cell, self.config(cell)), 0), cell.repeats)) for cell in self.cells]

    def run(self, base_env):
        started = time.monotonic()
        plan = self.plan()
        todo = sum(c.repeats - done for c, done in plan)
        self.say(f"sweep: {len(plan)} cells, {todo} runs to do ({sum(d for _, d in plan)} done earlier), "
                 f"results in {self.results_path}")
        runs_done, run_time = 0, 0.0
        try:
            for i, (cell, done) in enumerate(plan, start=1):
                if done >= cell.repeats:
                    self.say(f"cell {i}/{len(plan)} {cell.label()}: {done}/{cell.repeats} done earlier, skipped")
                    continue
                if cell.network and netem.requirements_problem():
                    self.say(f"cell {i}/{len(plan)} {cell.label()}: skipped ({netem.requirements_problem()})")
                    continue
                for repeat in range(done + 1, cell.repeats + 1):
                    remaining = todo - runs_done
                    eta = run_time / runs_done * remaining if runs_done else None
                    self.say(progress_line(i, len(plan), cell, repeat, time.monotonic() - started, eta))
                    t0 = time.monotonic()
                    self.run_one(i, cell, repeat, base_env)
                    runs_done += 1
                    run_time += time.monotonic() - t0
        finally:
            self.cluster.close()
        self.say(f"sweep finished in {duration(time.monotonic() - started)}: {runs_done} runs, "
                 f"{self.failed_runs} failed")
        return self.summary()

    def run_one(self, i, cell, repeat, base_env):
        log_dir = os.path.join(self.log_root, f"cell{i:02d}-r{repeat}-{time.strftime('%H%M%S')}")
        before = self.done_counts().get(cell_key(cell, self.config(cell)), 0)
        network = None
        try:
            if cell.network:
                launches, network = node_launches(cell, self.cluster.ensure(cell), log_dir, self.results_path,
                                                  base_env)
            else:
                launches = local_launch(cell, log_dir, self.results_path, base_env)
        except netem.ClusterError as e:
            self.failed_runs += 1
            self.say(f"  -> FAILED to set up the cluster: {e}")
            return
        sup = launch.Supervisor(launches, timeout=cell.timeout, stall=cell.stall, startup=cell.startup)
        outcome = sup.run()
        if outcome.status == "interrupted":
            raise Interrupted(outcome.detail)
        after = self.done_counts().get(cell_key(cell, self.config(cell)), 0)
        if outcome.ok and after > before:
            rec = [r for r in results.load(self.results_path) if record_key(r) == cell_key(cell, self.config(cell))][-1]
            m = rec["metrics"]
            self.say(f"  -> ok: {m['throughput']:.2f} {m['unit']} in {outcome.elapsed_s:.0f} s")
            return
        if outcome.ok:  # finished, but the run stored nothing that matches the cell
            outcome = dataclasses.replace(outcome, status="failed",
                                          detail="the run finished without storing a matching result record")
        self.failed_runs += 1
        identity = launch.RunIdentity(cell.benchmark, cell.mode, str(self.config(cell).get(METHOD_KEY[cell.mode])
                                                                     or cell.method or "unknown"),
                                      cell.preset, self.config(cell), cell.nodes,
                                      max(1, cell.world_size // cell.nodes), cell.world_size,
                                      network or planned_network(cell))
        results.append(self.results_path, launch.failure_record(identity, outcome))
        self.say(f"  -> FAILED: {outcome.detail} (logs: {log_dir})")
        for line in launch.format_report(outcome).splitlines()[1:]:
            self.say(f"     {line}")

    def summary(self):
        """mean ± std per sweep cell (results.aggregate over that cell's runs), efficiency against
        a baseline among them (results.add_efficiency)."""
        recs = results.load(self.results_path) if os.path.exists(self.results_path) else []
        by_key = {}
        for rec in recs:
            by_key.setdefault(record_key(rec), []).append(rec)
        rows, seen = [], set()
        for cell in self.cells:
            key = cell_key(cell, self.config(cell))
            if key in seen or key not in by_key:
                continue
            seen.add(key)
            for agg in results.aggregate(by_key[key]):
                rows.append(dict(agg, sweep_extra=cell_extra(cell)))
        rows = results.add_efficiency(rows)
        self.say(summary_table(rows))
        return rows


# ----------------------------------------------------------------------------------------------
# CLI


def _parser():
    p = argparse.ArgumentParser(prog="fleetbench sweep", description="Run a matrix of benchmark cells.")
    p.add_argument("file", nargs="?", help="sweep file (YAML)")
    p.add_argument("--preset", help=f"a sweep from {os.path.relpath(SWEEP_DIR, REPO_ROOT)}/NAME.yaml")
    p.add_argument("--results", default=registry.DEFAULT_RESULTS, help=f"results file (default {registry.DEFAULT_RESULTS})")
    p.add_argument("--repeats", type=int, help="override every cell's repeats")
    p.add_argument("--log-dir", default=None, help="where run logs go (default log/sweep-<name>)")
    p.add_argument("--cluster-name", default=netem.DEFAULT_PREFIX, help="emulated cluster name prefix (default fb)")
    p.add_argument("--dry-run", action="store_true", help="resolve and list the cells, run nothing")
    return p


def sweep_path(args):
    if bool(args.file) == bool(args.preset):
        raise SweepError("give a sweep FILE.yaml or --preset NAME (one of them)")
    if args.file:
        return args.file
    path = os.path.join(SWEEP_DIR, f"{args.preset}.yaml")
    if not os.path.exists(path):
        names = sorted(f[:-5] for f in os.listdir(SWEEP_DIR) if f.endswith(".yaml"))
        raise SweepError(f"--preset {args.preset!r}: no such sweep (available: {', '.join(names)})")
    return path


def cli(argv):
    args = _parser().parse_args(argv)
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        path = sweep_path(args)
        spec = load_spec(path)
        if args.repeats is not None:
            if args.repeats < 1:
                raise SweepError(f"--repeats {args.repeats}: expected >= 1")
            spec = dict(spec, repeats=args.repeats, cells=[{k: v for k, v in c.items() if k != "repeats"}
                                                           for c in spec["cells"]])
        cells = expand(spec, path)
        name = os.path.splitext(os.path.basename(path))[0]
        sweep = Sweep(cells, args.results, args.log_dir or os.path.join("log", f"sweep-{name}"),
                      cluster_prefix=args.cluster_name)
        env = launch.child_env()
        sweep.resolve_configs(env)
        if args.dry_run:
            for i, (cell, done) in enumerate(sweep.plan(), start=1):
                print(f"cell {i}/{len(cells)} {cell.label()}: {done}/{cell.repeats} done")
            return 0
        sweep.run(dict(os.environ))
        return 1 if sweep.failed_runs else 0
    except (SweepError, results.RecordError, netem.ClusterError, ValueError) as e:
        print(f"fleetbench sweep: error: {e}", file=sys.stderr)
        return 2
    except (Interrupted, KeyboardInterrupt) as e:
        print(f"fleetbench sweep: interrupted ({e or 'SIGINT'}); finished runs are stored, "
              f"run the same command again to resume", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, old_term)
