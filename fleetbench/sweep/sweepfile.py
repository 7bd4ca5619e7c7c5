"""Sweep files: what they may say, and the cells they expand to (pure: nothing runs here).

A sweep file lists cell groups; list values are axes, and a group expands to their product:

    repeats: 3                      # default 3; each repeat is one stored run
    cells:
      - benchmark: resnet50         # a registered benchmark (fleetbench.measure.registry)
        preset: tiny
        devices_per_node: [1, 2]    # processes per node (collective)
      - benchmark: ctr
        preset: tiny
        method: [async, geo]        # collective: config key `method`; PS: the PS mode key
        servers_workers: ["1/1", "2/2"]
      - benchmark: resnet50
        preset: tiny
        network: [1gbe, 10gbe]      # an emulated cluster per profile (root); nodes default to 2

Top-level `until_stable`, `target_ci`, `max_repeats`, `warmup_run`, `vary_seed` and `interleave`, and
the first three in a cell group (for its cells only): fleetbench.sweep.adaptive.
Other cell keys: script, nodes, set (config overrides; list values are axes too), timeout, stall,
startup (seconds allowed before the first progress line; default: stall). devices_per_node may
differ between nodes: "3+2" (fleetbench.hosts.hostlist). Top-level `hosts:` runs the cells on real
hosts (a hostfile path, relative to the sweep file, or a list like [node1:4, node2:4]); then
`nodes` > 1 needs no `network`. A run's identity is
`results.config_hash` of what makes it the same cell (benchmark, preset, resolved config, mode,
nodes, world size, network): run_key.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import argparse
import os

import yaml

from fleetbench import cmdline
from fleetbench.emulate import netem
from fleetbench.hosts import hostlist
from fleetbench.measure import registry
from fleetbench.store import results

REPO_ROOT = str(registry.REPO_ROOT)
SWEEP_DIR = str(registry.SWEEP_DIR)
METHOD_KEY = registry.METHOD_KEY
TOP_KEYS = {"description", "repeats", "timeout", "stall", "startup", "cells", "hosts",
            "until_stable", "target_ci", "max_repeats", "warmup_run", "vary_seed",
            "interleave"}  # the last six: sweep/adaptive.py
CELL_KEYS = {"benchmark", "script", "mode", "preset", "devices_per_node", "nodes", "method", "servers_workers",
             "network", "set", "repeats", "timeout", "stall", "startup", "until_stable", "target_ci", "max_repeats"}
STABILITY_KEYS = ("until_stable", "target_ci", "max_repeats")  # a cell's own; None: the sweep's
DEFAULTS = {"repeats": 3, "timeout": 900.0, "stall": 300.0, "startup": None}  # startup None: = stall
# A cell group's keys whose list values are axes (besides `set`), with their defaults.
AXES = {"preset": "full", "method": None, "network": None, "devices_per_node": 1, "servers_workers": "1/1",
        "nodes": None}


class SweepError(cmdline.UserError):
    """A bad sweep file or option; one line naming the file and key."""


@dataclasses.dataclass(frozen=True, kw_only=True)
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
    counts: tuple = None   # processes of each node when they differ ("3+2"); devices_per_node is the largest
    repeats: int = 3
    timeout: float = 900.0
    stall: float = 300.0
    startup: float = None
    until_stable: bool = None  # these three: sweep/adaptive.py; None: the sweep's choice
    target_ci: float = None
    max_repeats: int = None
    trace: str = None  # one run's --trace DIR (a sweep's --trace gives each run its own directory)

    @property
    def world_size(self) -> int:
        if self.mode == "ps":
            return self.workers
        return sum(self.counts) if self.counts else self.nodes * self.devices_per_node

    def extra_sets(self) -> list[str]:
        """Config overrides other than the method (they tell cells of one shape apart)."""
        return [s for s in self.sets if not s.startswith(f"{METHOD_KEY[self.mode]}=")]

    def label(self) -> str:
        shape = (f"{self.servers}s/{self.workers}w" if self.mode == "ps"
                 else "+".join(map(str, self.counts)) if self.counts else f"{self.nodes}x{self.devices_per_node}")
        extra = " ".join(self.extra_sets())
        parts = [self.benchmark, self.preset, self.mode, self.method or "", shape,
                 f"nodes={self.nodes}" if self.mode == "ps" and self.nodes > 1 else "",
                 f"net={self.network}" if self.network else "", extra]
        return " ".join(p for p in parts if p)

    def script_args(self, results_path: str) -> list[str]:
        args = ["--preset", self.preset]
        for s in self.sets:
            args += ["--set", s]
        if self.trace:
            args += ["--trace", self.trace]
        return args + ["--results", results_path]


# ----------------------------------------------------------------------------------------------
# Pure part: sweep files -> cells


def load_spec(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            spec = yaml.safe_load(f.read().decode("utf-8"))
    except OSError as e:
        raise SweepError(f"{path}: cannot read sweep file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise SweepError(f"{path}: not a text file (byte {e.start} is not UTF-8); expected a YAML sweep file") from None
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: not valid YAML ({str(e).splitlines()[0]}); expected a sweep file "
                         "(a YAML mapping with a list `cells`)") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("cells"), list) or not spec["cells"]:
        raise SweepError(f"{path}: expected a mapping with a non-empty list `cells`")
    unknown = set(spec) - TOP_KEYS
    if unknown:
        raise SweepError(f"{path}: unknown key {sorted(unknown)[0]!r} (expected {', '.join(sorted(TOP_KEYS))})")
    return spec


def find_script(benchmark: str, script: str | None = None, root: str = REPO_ROOT,
                mode: str | None = None) -> tuple[str | None, str | None]:
    """(path, family) of a registered benchmark (its script of family `mode` when it has one: a
    model trained both ways); with `script:` a file of the benchmark's family (a variant of it);
    (None, None) when there is none."""
    bench = registry.BENCHMARKS.get(benchmark)
    if bench is None:
        return None, None
    if mode in registry.families(benchmark):
        bench = registry.get(benchmark, mode)
    if script:
        path = script if os.path.isabs(script) else os.path.join(root, script)
        return (path, bench.family) if os.path.exists(path) else (None, None)
    return str(bench.path), bench.family


def _axis(value: object) -> list:
    return value if isinstance(value, list) else [value]


def expand(spec: dict, where: str = "sweep", root: str = REPO_ROOT, on_hosts: bool = False) -> list[Cell]:
    """All cells of a sweep spec, in file order (raises SweepError naming where and the key).
    on_hosts: the cells run on several hosts (fleetbench.hosts.remote), not only on this machine."""
    top = dict({k: spec.get(k, v) for k, v in DEFAULTS.items()}, on_hosts=on_hosts or bool(spec.get("hosts")))
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
        script, mode = find_script(group["benchmark"], group.get("script"), root, group.get("mode"))
        if script is None:
            raise SweepError(f"{at}: no script for benchmark {group['benchmark']!r} "
                             f"(registered: {', '.join(registry.BENCHMARKS)})")
        mode = group.get("mode", mode)
        if mode not in METHOD_KEY:
            raise SweepError(f"{at}: mode {mode!r}: expected one of {', '.join(METHOD_KEY)}")
        sets = group.get("set") or {}
        if not isinstance(sets, dict):
            raise SweepError(f"{at}: `set` must be a mapping of config key -> value(s)")
        axes = {key: _axis(group.get(key, default)) for key, default in AXES.items()}
        axes["sets"] = [[f"{k}={_scalar(v)}" for v in _axis(vals)] for k, vals in sets.items()]
        for values in itertools.product(*list(axes.values())[:-1], *axes["sets"]):
            choice = dict(zip(AXES, values), sets=tuple(values[len(AXES):]))
            cells.append(_cell(at, dict(group, benchmark=group["benchmark"], script=script, mode=mode), top, choice))
    return cells


def _scalar(v: object) -> str:
    return json.dumps(v) if isinstance(v, bool) else str(v)


def _positive_int(at: str, key: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SweepError(f"{at}: {key} {value!r}: expected an integer >= 1")
    return value


def _cell(at: str, group: dict, top: dict, choice: dict) -> Cell:
    """One cell of a group (`group` with its resolved script and mode) for one choice of axes."""
    network, mode, method = choice["network"], group["mode"], choice["method"]
    if network is not None and network not in netem.PROFILES:
        raise SweepError(f"{at}: network {network!r}: expected one of {', '.join(netem.PROFILES)}")
    nodes = _positive_int(at, "nodes", choice["nodes"] if choice["nodes"] is not None else (2 if network else 1))
    if nodes > 1 and network is None and not top["on_hosts"]:
        raise SweepError(f"{at}: nodes {nodes} on one machine needs a `network` profile (an emulated cluster)")
    servers, workers = _servers_workers(at, choice["servers_workers"]) if mode == "ps" else (0, 0)
    sets = ((f"{METHOD_KEY[mode]}={method}",) if method is not None else ()) + choice["sets"]
    knobs = _knobs(at, {k: group.get(k, top[k]) for k in DEFAULTS})
    try:
        counts = hostlist.counts_for(nodes, hostlist.parse_per_node(choice["devices_per_node"]))
    except hostlist.HostsError as e:
        raise SweepError(f"{at}: {e}") from None
    stable = {k: check_stability_key(f"{at}: {k}", k, group[k]) for k in STABILITY_KEYS if k in group}
    return Cell(**stable, benchmark=group["benchmark"], script=group["script"], mode=mode, preset=str(choice["preset"]),
                sets=sets, method=method, nodes=nodes, devices_per_node=max(counts),
                counts=counts if len(set(counts)) > 1 else None,
                servers=servers, workers=workers, network=network, **knobs)


def check_stability_key(where: str, key: str, value: object) -> object:
    """A value of until_stable / warmup_run / vary_seed / interleave (true or false), target_ci (a percentage) or
    max_repeats (>= 2), checked; SweepError naming `where` otherwise."""
    if key in ("until_stable", "warmup_run", "vary_seed", "interleave") and not isinstance(value, bool):
        raise SweepError(f"{where}: {value!r}: expected true or false")
    if key == "target_ci" and (isinstance(value, bool) or not isinstance(value, (int, float))
                               or not 0 < value <= 100):
        raise SweepError(f"{where}: {value!r}: expected a percentage > 0 and <= 100, e.g. 2")
    if key == "max_repeats" and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
        raise SweepError(f"{where}: {value!r}: expected a whole number >= 2")
    return value


def _servers_workers(at: str, text: object) -> tuple[int, int]:
    try:
        servers, workers = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise SweepError(f"{at}: servers_workers {text!r}: expected SERVERS/WORKERS like 2/2") from None
    return _positive_int(at, "servers", servers), _positive_int(at, "workers", workers)


def _knobs(at: str, knobs: dict) -> dict:
    """repeats, timeout, stall, startup of a cell, checked (startup None: the stall value)."""
    _positive_int(at, "repeats", knobs["repeats"])
    for k in ("timeout", "stall", "startup"):
        if k == "startup" and knobs[k] is None:
            continue
        if not isinstance(knobs[k], (int, float)) or isinstance(knobs[k], bool) or knobs[k] <= 0:
            raise SweepError(f"{at}: {k} {knobs[k]!r}: expected seconds > 0")
        knobs[k] = float(knobs[k])
    return knobs


def network_key(network: dict | None) -> dict | None:
    """The part of a network dict that makes runs comparable (what was asked for)."""
    if not network:
        return None
    return {"profile": network.get("profile"), "rate_gbit": network.get("rate_gbit"),
            "delay_ms": network.get("delay_ms_requested", network.get("delay_ms"))}


def run_key(benchmark: str, preset: str | None, config: dict, mode: str, nodes: int, world_size: int,
            network: dict | None) -> str:
    """results.config_hash of a run's identity; `runtime` (device, threads, versions the loop
    adds to the stored config), the seed (repeats may differ by seed: measure.repeats.experiment) and what
    the network could not apply are not part of it."""
    config = {k: v for k, v in config.items() if k not in ("runtime", "seed")}
    return results.config_hash({"benchmark": benchmark, "preset": preset, "config": config, "mode": mode,
                                "nodes": nodes, "world_size": world_size, "network": network_key(network)})


def record_key(rec: dict) -> str:
    return run_key(rec["benchmark"], rec.get("preset"), rec["config"], rec["mode"], rec["nodes"],
                   rec["world_size"], rec.get("network"))


def record_paddle(rec: dict) -> str | None:
    """The Paddle version a record ran under (None for records without an env block)."""
    return ((rec.get("env") or {}).get("paddle") or {}).get("version")


def planned_network(cell: Cell) -> dict | None:
    if not cell.network:
        return None
    return netem.network_dict(netem.shaping_from(cell.network), cell.nodes)


def cell_key(cell: Cell, config: dict) -> str:
    return run_key(cell.benchmark, cell.preset, config, cell.mode, cell.nodes, cell.world_size,
                   planned_network(cell))


def untraced(cell: Cell, config: dict) -> str | None:
    """Why a sweep with --trace runs `cell` without a trace (None: it traces it). A trace holds
    training steps and their parts: the comm benchmark has none; a parameter-server trace is its
    step breakdown's marks, which --trace would switch on, making the run another cell's."""
    if cell.mode == "comm":
        return "the comm benchmark times collectives, not training steps: it writes no trace"
    if cell.mode == "ps" and not (config.get("measure") or {}).get("breakdown"):
        return "a parameter-server trace is its step breakdown's marks: give the cell measure.breakdown: true"
    return None


def _preset(text: str) -> str:
    if "/" in text or not os.path.isfile(os.path.join(SWEEP_DIR, f"{text}.yaml")):
        names = sorted(f[:-5] for f in os.listdir(SWEEP_DIR) if f.endswith(".yaml"))
        raise cmdline.Refused(f"{text!r}: no such sweep (expected one of {', '.join(names)})")
    return text


PRESET = cmdline.Kind("a sweep of fleetbench/presets/sweeps", _preset, ("nosuch", "", "../x"))


def sweep_path(args: argparse.Namespace) -> str:
    if bool(args.file) == bool(args.preset):
        raise SweepError("give a sweep FILE.yaml or --preset NAME (one of them)")
    if args.file:
        return args.file
    path = os.path.join(SWEEP_DIR, f"{args.preset}.yaml")
    if not os.path.exists(path):
        names = sorted(f[:-5] for f in os.listdir(SWEEP_DIR) if f.endswith(".yaml"))
        raise SweepError(f"--preset {args.preset!r}: no such sweep (available: {', '.join(names)})")
    return path
