"""Schema 1 of a result record: its constants, what a valid record is, and a loaded record as a
type (pure; no I/O).

docs/reference/records.md describes every field; store/results.py builds and stores records,
measure/repeats/aggregate.py groups them.

`Record` holds what every record has as fields (identity, shape, metrics with their unit,
environment, origin), built once from a validated object by `Record.of`: readers take fields
rather than looking keys up. A Record is frozen and is also a read-only mapping of the JSON object
it was read from (`record["metrics"]`, `dict(record)`): that object is what the store writes back
and imports, byte for byte, and what code that has not moved to the fields yet still reads.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

from fleetbench import cmdline

SCHEMA = 1
MODES = ("collective", "ps", "comm", "diagnose")
UNITS = ("images/s", "tokens/s", "samples/s", "sequences/s", "words/s", "examples/s", "GB/s")  # GB/s: comm busbw
# A record with `source` set was not measured here (e.g. a published table); see docs/guide/results.md.
SOURCE_KINDS = ("published",)

def at(doc, *path: str, default: Any = None) -> Any:
    """The value at `path` (nested keys) of a JSON object: `default` where a step is absent, null
    or not an object. The one lookup of a key in a stored document, where it is parsed."""
    for key in path:
        doc = doc[key] if isinstance(doc, Mapping) and key in doc else None
        if doc is None:
            return default
    return doc


class RecordError(cmdline.UserError):
    """A record or results file that does not follow schema 1; the message is one line."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _problem(record) -> str | None:
    """What is wrong with `record`, or None. Checks in reading order; first problem wins."""
    if not isinstance(record, Mapping):
        return f"expected a JSON object, got {type(record).__name__}"
    if at(record, "schema") != SCHEMA:
        return f"schema: expected {SCHEMA}, got {at(record, 'schema')!r}"
    for key in ("id", "time", "benchmark", "method"):
        if not isinstance(at(record, key), str) or not at(record, key):
            return f"{key}: expected a non-empty string, got {at(record, key)!r}"
    if at(record, "mode") not in MODES:
        return f"mode: expected one of {'|'.join(MODES)}, got {at(record, 'mode')!r}"
    if at(record, "preset") is not None and not isinstance(record["preset"], str):
        return f"preset: expected a string or null, got {record['preset']!r}"
    if not isinstance(at(record, "config"), dict):
        return f"config: expected an object, got {at(record, 'config')!r}"
    for key in ("nodes", "devices_per_node", "world_size"):
        if not _is_int(at(record, key)) or record[key] < 1:
            return f"{key}: expected an integer >= 1, got {at(record, key)!r}"
    network = at(record, "network")
    if network is not None and not isinstance(network, dict):
        return f"network: expected an object or null, got {network!r}"
    launch = at(record, "launch")
    if launch is not None and not (isinstance(launch, dict) and isinstance(at(launch, "executor"), str)
                                   and isinstance(at(launch, "hosts"), list)):
        return f"launch: expected null or an object with executor (a string) and hosts (a list), got {launch!r}"
    error = at(record, "error")
    if error is not None and (not isinstance(error, str) or not error):
        return f"error: expected null or a non-empty message, got {error!r}"
    if record["mode"] == "diagnose":  # figures with units in their names, no one throughput (docs/guide/diagnose.md)
        metrics_problem = None if isinstance(at(record, "metrics"), dict) else "metrics: expected an object"
    else:
        metrics_problem = _metrics_problem(at(record, "metrics"), failed=error is not None)
    problem = metrics_problem or _origin_problem(at(record, "source"), at(record, "env"))
    if problem:
        return problem
    if at(record, "topology") is not None and not isinstance(record["topology"], dict):
        return f"topology: expected an object or null, got {record['topology']!r}"
    if at(record, "git") is not None and not isinstance(record["git"], str):
        return f"git: expected a commit sha or null, got {record['git']!r}"
    return None


def _origin_problem(source, env) -> str | None:
    """A published record names its source and may lack env; one measured here carries env."""
    if source is not None:
        if not isinstance(source, dict) or at(source, "kind") not in SOURCE_KINDS:
            return f"source: expected null or an object with kind in {'|'.join(SOURCE_KINDS)}"
        for key in ("name", "citation"):
            if not isinstance(at(source, key), str) or not source[key]:
                return f"source.{key}: expected a non-empty string (short name; where it was published)"
    if source is None and not isinstance(env, dict):
        return "env: expected an object (every result measured here carries its environment)"
    if source is not None and env is not None and not isinstance(env, dict):
        return f"env: expected an object or null, got {env!r}"
    return None


def _metrics_problem(metrics, failed: bool) -> str | None:
    if metrics is None:
        return None if failed else "metrics: missing (only a failed run, with error set, may omit it)"
    if not isinstance(metrics, dict):
        return f"metrics: expected an object, got {metrics!r}"
    if failed and "throughput" not in metrics:
        return None  # partial metrics of a failed run
    throughput = at(metrics, "throughput")
    if not _is_number(throughput):
        return f"metrics.throughput: expected a finite number, got {throughput!r}"
    if throughput < 0:
        return f"metrics.throughput: expected >= 0, got {throughput!r}"
    if "unit" not in metrics:
        return f"metrics.unit: missing (expected one of {', '.join(UNITS)})"
    if metrics["unit"] not in UNITS:
        return f"metrics.unit: expected one of {', '.join(UNITS)}, got {metrics['unit']!r}"
    std = at(metrics, "throughput_std")
    if std is not None and (not _is_number(std) or std < 0):
        return f"metrics.throughput_std: expected a number >= 0 or null, got {std!r}"
    repeats = at(metrics, "repeats")
    if repeats is not None and (not _is_int(repeats) or repeats < 1):
        return f"metrics.repeats: expected an integer >= 1 or null, got {repeats!r}"
    return _timing_problem(metrics)


# the machine-speed probe's figures (metrics.PROBE_KEYS; named here too: schema imports only cmdline)
PROBE_FIGURES = ("probe_gemm_gflops_before", "probe_gemm_gflops_after", "probe_triad_gbps_before",
                 "probe_triad_gbps_after", "probe_scalar_mops_before", "probe_scalar_mops_after")


def _timing_problem(metrics: dict) -> str | None:
    """The speed probe's figures (> 0 or null), its definition (an object or null) and the step
    times (by rank, each a list of milliseconds >= 0), where a record has them."""
    for key in PROBE_FIGURES:
        value = at(metrics, key)
        if value is not None and (not _is_number(value) or value <= 0):
            return f"metrics.{key}: expected a number > 0 or null, got {value!r}"
    if at(metrics, "probe") is not None and not isinstance(metrics["probe"], dict):
        return f"metrics.probe: expected an object (the probe's workload) or null, got {metrics['probe']!r}"
    times = at(metrics, "step_times_ms")
    if times is not None and not (isinstance(times, list) and all(
            isinstance(row, list) and all(_is_number(t) and t >= 0 for t in row) for row in times)):
        return "metrics.step_times_ms: expected a list (by rank) of lists of milliseconds >= 0, or null"
    return None


def validate(record, where: str = "") -> None:
    """Raise RecordError("<where>: <field>: <what was expected>") if `record` breaks schema 1."""
    problem = _problem(record)
    if problem:
        raise RecordError(f"{where or 'record'}: {problem}")


# ---- a loaded record ----------------------------------------------------------------------------


def _number(value) -> float | None:
    """`value` when it is a number (as stored: an int stays an int), else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclasses.dataclass(frozen=True)
class Metrics:
    """What a run measured: its figure with its unit (both None for a failed run or a diagnosis),
    the published spread and repeats where a source gave them, and every figure by name."""
    throughput: float | None
    unit: str | None
    throughput_std: float | None
    repeats: int | None
    doc: Mapping[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def of(cls, doc: Mapping | None) -> Metrics:
        doc = doc or {}
        return cls(throughput=_number(at(doc, "throughput")), unit=at(doc, "unit"),
                   throughput_std=_number(at(doc, "throughput_std")), repeats=at(doc, "repeats"), doc=doc)

    def figure(self, name: str) -> float | None:
        """A numeric figure by name (`mfu`, `interference_cpu_pct`, ...); None when absent or not a number."""
        return _number(at(self.doc, name))

    def block(self, name: str, default: Any = None) -> Any:
        """A structured figure by name (`epochs`, `ops`, `nodes`, `trace_files`): lists and objects
        as stored, `default` when absent or null."""
        return at(self.doc, name, default=default)

    def names(self) -> list[str]:
        """The figures this record has a value for (not null)."""
        return [name for name, value in self.doc.items() if value is not None]


@dataclasses.dataclass(frozen=True)
class PaddleBuild:
    """The Paddle a run used (env.paddle)."""
    version: str | None
    compiled_with_cuda: bool
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    commit: str | None
    simulated: bool

    @classmethod
    def of(cls, doc: Mapping) -> PaddleBuild:
        return cls(version=at(doc, "version"), compiled_with_cuda=bool(at(doc, "compiled_with_cuda")),
                   cuda=at(doc, "cuda"), cudnn=at(doc, "cudnn"), nccl=at(doc, "nccl"),
                   commit=at(doc, "commit"), simulated=bool(at(doc, "simulated")))


@dataclasses.dataclass(frozen=True)
class Environment:
    """The software and machine of a run (its `env` block, rank 0's): the parts readers compare,
    and the block as stored (`doc`) for the rest."""
    cpu_model: str | None
    cpu_cores: int | None
    cpu_threads: int | None  # usable by the run where the record says, else the CPU's
    gpus: tuple[str, ...]  # one model name a GPU ("?" where not reported)
    gpu_count: int | None
    nvidia_driver: str | None
    paddle: PaddleBuild | None
    kernel: str | None
    omp_threads: int | None
    memory_total_mib: int | None
    infiniband: tuple
    doc: Mapping[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def of(cls, doc: Mapping) -> Environment:
        cpu, memory = at(doc, "cpu") or {}, at(doc, "memory") or {}
        return cls(cpu_model=at(cpu, "model"), cpu_cores=at(cpu, "cores"),
                   cpu_threads=at(cpu, "usable_threads") or at(cpu, "threads"),
                   gpus=tuple(at(gpu, "name") or "?" for gpu in at(doc, "gpus") or ()),
                   gpu_count=at(doc, "gpu_count"), nvidia_driver=at(doc, "nvidia_driver"),
                   paddle=PaddleBuild.of(doc["paddle"]) if at(doc, "paddle") else None,
                   kernel=at(doc, "os", "kernel"),
                   omp_threads=at(doc, "threads", "omp_num_threads"),
                   memory_total_mib=at(memory, "total_mib"), infiniband=tuple(at(doc, "infiniband") or ()), doc=doc)


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a record not measured here was published (`source`)."""
    kind: str
    name: str
    citation: str


@dataclasses.dataclass(frozen=True, eq=False)
class Record(Mapping):
    """One schema-1 result record (docs/reference/records.md), loaded."""
    id: str
    time: str
    benchmark: str
    preset: str | None
    mode: str
    method: str
    nodes: int
    devices_per_node: int
    world_size: int
    config: Mapping[str, Any] = dataclasses.field(repr=False)
    network: Mapping[str, Any] | None
    launch: Mapping[str, Any] | None
    metrics: Metrics = dataclasses.field(repr=False)
    env: Environment | None = dataclasses.field(repr=False)
    topology: Mapping[str, Any] | None = dataclasses.field(repr=False)
    source: Source | None
    git: str | None
    error: str | None
    doc: Mapping[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def of(cls, doc: Mapping) -> Record:
        """The Record of a schema-1 object that passed schema.validate (a Record passes through)."""
        if isinstance(doc, Record):
            return doc
        source = at(doc, "source")
        return cls(id=doc["id"], time=doc["time"], benchmark=doc["benchmark"], preset=at(doc, "preset"),
                   mode=doc["mode"], method=doc["method"], nodes=doc["nodes"],
                   devices_per_node=doc["devices_per_node"], world_size=doc["world_size"], config=doc["config"],
                   network=at(doc, "network"), launch=at(doc, "launch"), metrics=Metrics.of(at(doc, "metrics")),
                   env=Environment.of(doc["env"]) if at(doc, "env") is not None else None,
                   topology=at(doc, "topology"),
                   source=Source(source["kind"], source["name"], source["citation"]) if source else None,
                   git=at(doc, "git"), error=at(doc, "error"), doc=doc)

    @property
    def ok(self) -> bool:
        """Whether the run succeeded (no error)."""
        return self.error is None

    @property
    def measured(self) -> bool:
        """Measured here, not a published figure."""
        return self.source is None

    def setting(self, dotted: str, default: Any = None) -> Any:
        """A config value by dotted key (`runtime.threads.omp_num_threads`), `default` when absent or null."""
        return at(self.config, *dotted.split("."), default=default)

    # the JSON object as stored, read-only
    def __getitem__(self, key: str) -> Any:
        return self.doc[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.doc)

    def __len__(self) -> int:
        return len(self.doc)

    def __hash__(self) -> int:
        return hash(self.id)
