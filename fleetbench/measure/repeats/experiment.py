"""What makes two runs repeats of one experiment, read from their records.

Repeats are pooled (averaged) only when everything that defines the experiment is equal:

- what ran: source (published numbers are never pooled with ours), benchmark, preset, mode,
  method, and the resolved config, except the keys in NOISE_KEYS and those of ABSENT_MEANS at the
  value a record without them ran (a key some records predate is no difference);
- where: nodes, devices per node, world size, and the network (its profile, plus the delay that
  was really applied);
- with what: the Paddle build (version, CPU or CUDA build, commit), the device model (the GPU
  model when the run used GPUs, else the CPU model) and the host class (core count and memory,
  plus the CPU model for GPU runs). These come from the record's `env`, which is rank 0's: a
  multi-node run is described by its first node.

NOISE_KEYS are what may differ between repeats of one experiment: the seed (a repeat with another
seed is still a repeat), who chose the thread count (the count itself is part of the config) and
the sweep's until-stable policy (runtime.repeats: how many runs were asked for, not how they ran)
and a parameter-server worker's start-up bound (init_timeout_s: when to give up, not what ran),
and how a run is timed (measure.*: the speed probe, warm-up until settled, a window calibrated in
seconds; a step's work is the same, the record's warmup_steps and measured_steps say how it ran),
except where a family's step does more for it (WORK_IN_FAMILY: a PS worker's breakdown marks).
Run-time values such as ports and addresses are not in the config at all.

The cell key is declared here once (WORK, CIRCUMSTANCES): what defines a cell of work, and what
it merely ran on or with. An Experiment is both, so repeats pool only on one build and machine;
`fleetbench compare` and `history` match cells on WORK and compare across circumstances; a scaling
baseline (`comparable`) shares a cell's work but for the job's size, network and method, and its
circumstances.
"""
from __future__ import annotations

import dataclasses
import json

from fleetbench import cmdline

# Config keys (dotted) that differ between repeats of one experiment; see the module docstring.
NOISE_KEYS = ("seed", "runtime.threads.source", "runtime.repeats.until_stable", "runtime.repeats.target_ci_pct",
              "runtime.repeats.min_repeats", "runtime.repeats.max_repeats", "init_timeout_s",
              "measure.probe", "measure.breakdown", "measure.settle_steps", "measure.window_s")
# Config keys some stored records predate (or outlived), by family (the record's `mode`), with the
# value that means what a record without the key ran: absent and at this value are the same work,
# so neither makes another experiment, nor a table column (the demo's ResNet50 runs from before the
# epoch schedule have no data.val_path, epochs, eval_batch_size, stop_at_target, target_accuracy;
# the PS family's unused `steps: 0` went). At any other value the key is part of the work. Each
# value is its config's default (tests/unit/test_cell_key.py holds them to the dataclasses); a key
# added to a config later goes here with its default.
ABSENT_MEANS = {
    "collective": {"data.val_path": None, "epochs": 1, "eval_batch_size": 256, "stop_at_target": False,
                   "target_accuracy": None},
    "ps": {"data.val_path": None, "steps": 0, "measure.breakdown": False},
}
# NOISE_KEYS that are work in one family: a parameter-server run's step-breakdown marks are py_func
# ops in its program that cost 5.8% of a CTR tiny step (bench/py_func_cost.py), so PS runs with and
# without them are two cells (a collective run's timers are always on: the key does nothing there).
WORK_IN_FAMILY = {"ps": ("measure.breakdown",)}
# Config keys that follow from the method (mode for PS) and from how many processes share a
# node (threads, PS server/worker counts): left out when looking for a comparable baseline.
METHOD_KEYS = ("method", "mode")
RUNTIME_PREFIX = "runtime."

# What defines a cell of work: two runs equal on these measured the same work (the config without
# NOISE_KEYS, so precision, batch and every model setting are in it).
WORK = ("source", "benchmark", "preset", "mode", "method", "network", "nodes", "devices_per_node",
        "world_size", "config")
# What the work ran on and with, per group; each run also has its own time and git commit. The
# config repeats the Paddle version (runtime.paddle): a circumstance, not part of the work.
CIRCUMSTANCES = ("paddle", "device", "host")
CONFIG_CIRCUMSTANCES = ("config.runtime.paddle",)
RUN_CIRCUMSTANCES = ("time", "git")
# The job's size: what a scaling curve varies.
SHAPE = ("nodes", "devices_per_node", "world_size")


@dataclasses.dataclass(frozen=True)
class Experiment:
    """The identity of an aggregation group: runs with equal Experiments are its repeats."""
    source: str | None
    benchmark: str
    preset: str | None
    mode: str
    method: str
    network: str | None
    nodes: int
    devices_per_node: int
    world_size: int
    paddle: str | None
    device: str | None
    host: str | None
    config: str  # canonical JSON of the config without NOISE_KEYS (hashable)

    def fields(self) -> dict:
        """The identity as plain JSON values (config as an object)."""
        out = dataclasses.asdict(self)
        out["config"] = json.loads(self.config)
        return out

    def sort_key(self) -> tuple:
        return tuple("" if value is None else value for value in dataclasses.astuple(self))


def of(record: dict) -> Experiment:
    """The experiment `record` is a run of."""
    return Experiment(
        source=source_name(record), benchmark=record["benchmark"], preset=record.get("preset"),
        mode=record["mode"], method=record["method"], network=network_name(record.get("network")),
        nodes=record["nodes"], devices_per_node=record["devices_per_node"],
        world_size=record["world_size"], paddle=paddle_build(record.get("env")),
        device=device_model(record), host=host_class(record),
        config=json.dumps(work_config(record), sort_keys=True, default=str))


def work_config(record: dict) -> dict:
    """The config that defines a record's work: without NOISE_KEYS, nor the keys of ABSENT_MEANS at
    the value their absence means."""
    flat, absent = flat_config(record["config"]), ABSENT_MEANS.get(record["mode"], {})
    same = [key for key, value in absent.items() if key in flat and json.loads(flat[key]) == value]
    noise = tuple(k for k in NOISE_KEYS if k not in WORK_IN_FAMILY.get(record["mode"], ()))
    return _without(record["config"], noise + tuple(same))


assert tuple(f.name for f in dataclasses.fields(Experiment)) == WORK[:-1] + CIRCUMSTANCES + ("config",)


class KeyNameError(cmdline.UserError):
    """A key name that is neither a field of the cell key nor a config key (one line)."""


def key_fields(item: dict) -> dict:
    """{name: value} of a record's or an aggregation group's cell key and circumstances: WORK,
    CIRCUMSTANCES, the config flattened to dotted `config.` keys (JSON text), and for a record its
    time and git."""
    fields = of(item).fields() if "metrics" in item and "schema" in item else dict(item)
    out = {name: fields.get(name) for name in WORK + CIRCUMSTANCES if name != "config"}
    out.update({f"config.{k}": v for k, v in flat_config(fields.get("config") or {}).items()})
    out.update({name: item.get(name) for name in RUN_CIRCUMSTANCES if name in item})
    return out


def cell_key(item: dict, ignore=(), match=()) -> tuple:
    """The declared key of `item`'s cell (a record or a group): the WORK fields, config keys
    dotted, minus `ignore` (a field, a dotted config key, or a prefix of them such as
    `config.runtime`), plus the `match`ed circumstances (e.g. `paddle`) — sorted (name, value) pairs."""
    fields = key_fields(item)
    work = {n: v for n, v in fields.items()
            if (n.startswith("config.") and n not in CONFIG_CIRCUMSTANCES) or n in WORK}
    work.update({n: fields.get(n) for n in match})
    return tuple(sorted((n, v) for n, v in work.items() if not _named(n, ignore)))


def _named(name: str, names) -> bool:
    return any(name == n or name.startswith(n + ".") for n in names)


def check_key_names(names, items: list[dict], flag: str) -> None:
    """KeyNameError naming `flag` unless every name is a cell-key field, a circumstance or a config key
    (or a prefix of config keys) of some of `items`."""
    known = set(WORK + CIRCUMSTANCES + RUN_CIRCUMSTANCES)
    for item in items:
        known |= {n for n in key_fields(item) if n.startswith("config.")}
    for name in names:
        if name not in known and not any(k.startswith(name + ".") for k in known):
            raise KeyNameError(f"{flag} {name}: not a cell key; expected one of {', '.join(WORK[:-1] + CIRCUMSTANCES)}, "
                            f"or config.KEY (e.g. config.batch_size)")


def key_of(group: dict) -> Experiment:
    """The Experiment of an aggregation group (a dict made by `aggregate.aggregate`), so that
    records (`of`) and groups can be matched by one key."""
    names = [field.name for field in dataclasses.fields(Experiment) if field.name != "config"]
    return Experiment(**{name: group[name] for name in names},
                      config=json.dumps(group["config"], sort_keys=True, default=str))


def source_name(record: dict) -> str | None:
    """None for results measured here; the short source name for published ones."""
    source = record.get("source")
    return source["name"] if source else None


def network_name(network: dict | None) -> str | None:
    """Name of a network setting: its profile, plus the delay really applied if any (`10gbe+0.05ms`);
    a custom setting is named by its numbers (`2.5gbit-0.05ms`)."""
    if not network:
        return None
    profile, rate, delay = network.get("profile"), network.get("rate_gbit"), network.get("delay_ms")
    if profile and profile != "custom":
        return f"{profile}+{delay:g}ms" if delay else str(profile)
    parts = ([f"{rate:g}gbit"] if rate is not None else []) + ([f"{delay:g}ms"] if delay else [])
    return "-".join(parts) or "custom"


# A build on the test suite's simulated GPU host (tests/gpu_sim; machine/env.py marks its records):
# its figures are CPU tensors' and must never pass for a GPU measurement.
SIMULATED = "(simulated)"


def paddle_build(env: dict | None) -> str | None:
    """e.g. '2.6.2 CPU 8ce0de5' or '3.3.1 CUDA 12.6 1a2b3c4'; None when the record has no env."""
    paddle = (env or {}).get("paddle")
    if not paddle:
        return None
    build = f"CUDA {paddle.get('cuda') or '?'}" if paddle.get("compiled_with_cuda") else "CPU"
    if paddle.get("simulated"):  # the test suite's simulated GPU host: never pooled with a real build
        build += f" {SIMULATED}"
    commit = (paddle.get("commit") or "")[:7]
    return " ".join(part for part in (paddle.get("version") or "?", build, commit) if part)


def _ran_on_gpu(record: dict) -> bool:
    device = ((record.get("config") or {}).get("runtime") or {}).get("device") or ""
    return str(device).lower().startswith(("gpu", "cuda"))


def device_model(record: dict) -> str | None:
    """The GPU model(s) of a GPU run, else the CPU model; None without env."""
    env = record.get("env")
    if not env:
        return None
    if _ran_on_gpu(record):
        names = sorted({gpu.get("name") or "?" for gpu in env.get("gpus") or []})
        return " + ".join(names) or "GPU (model not reported)"
    return (env.get("cpu") or {}).get("model")


def host_class(record: dict) -> str | None:
    """Cores and memory of the host (memory in whole GiB: a few MiB of kernel reservation is
    not another machine); GPU runs add the CPU model, which a CPU run has as its device."""
    env = record.get("env")
    if not env:
        return None
    cpu, memory = env.get("cpu") or {}, env.get("memory") or {}
    cores, threads = cpu.get("cores"), cpu.get("usable_threads") or cpu.get("threads")
    parts = [f"{cores} cores" + (f"/{threads} threads" if threads and threads != cores else "")]
    if memory.get("total_mib"):
        parts.append(f"{round(memory['total_mib'] / 1024)} GiB")
    if _ran_on_gpu(record) and cpu.get("model"):
        parts.insert(0, cpu["model"])
    return ", ".join(parts)


def flat_config(config: dict, prefix: str = "") -> dict:
    """{dotted key: JSON text of the value} of a nested config."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flat_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value, sort_keys=True, default=str)
    return flat


def _without(config: dict, dotted_keys) -> dict:
    flat = {k: v for k, v in flat_config(config).items() if k not in dotted_keys}
    nested: dict = {}
    for key, text in flat.items():
        *parents, leaf = key.split(".")
        node = nested
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = json.loads(text)
    return nested


def comparable(group: dict) -> tuple:
    """What a scaling baseline must share with `group` (a group or a dict of its fields and unit):
    the cell key but for the job's size, network and method, and the config keys that follow
    from those (METHOD_KEYS, runtime.*); and the circumstances. (source, benchmark, preset, unit,
    paddle, device, host, config JSON)."""
    ignore = SHAPE + ("network", "source", "benchmark", "preset") + METHOD_KEYS + \
        tuple(f"config.{k}" for k in METHOD_KEYS) + ("config." + RUNTIME_PREFIX.rstrip("."),)
    config = dict(cell_key(group, ignore=ignore))
    return (group["source"], group["benchmark"], group["preset"], group["unit"], group["paddle"],
            group["device"], group["host"], json.dumps(config, sort_keys=True))


def differing(configs: list[dict]) -> list[str]:
    """Dotted config keys whose values are not all equal across `configs`."""
    flats = [flat_config(c) for c in configs]
    keys = set().union(*flats) if flats else set()
    return sorted(k for k in keys if len({f.get(k) for f in flats}) > 1)
