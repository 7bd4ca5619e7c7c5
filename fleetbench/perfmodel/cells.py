"""Result records pooled into cells, and the matching the breakdown needs: a training cell's
method=none control, its 1-device run, and the all-reduce link of its shape and network.

A cell is every successful run of one experiment (measure.repeats.experiment: the same pooling as every
report). Its figures are means over those runs but the throughput outliers (measure.repeats.stability.kept,
as a report group's figure leaves them out; `excluded` counts them). Parameter-server records are
not explained (no all-reduce) and are skipped.
"""
from __future__ import annotations

import dataclasses
import statistics

from fleetbench.perfmodel import alphabeta, gradbytes, nccl, overlap, published
from fleetbench.emulate.netem_plan import PROFILES  # the link profiles: the pure plan's table, no tools
from fleetbench.measure.repeats import experiment, stability
from fleetbench.measure.registry import CONTROL  # the no-synchronisation control's method

POST_BACKWARD = ("bsp", "fp16_allreduce")  # methods that all-reduce after backward: no overlap


@dataclasses.dataclass(frozen=True)
class Shape:
    nodes: int
    devices_per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    def __str__(self) -> str:
        return f"{self.nodes}x{self.devices_per_node}"


@dataclasses.dataclass
class Cell:
    benchmark: str
    preset: str | None
    method: str
    network: str | None
    shape: Shape
    work: tuple  # what runs of the same model and per-rank work share (_work)
    runs: int
    step_ms: float  # slowest rank's wall time per step (metrics.step_time_ms), mean over runs
    step_std_ms: float
    reader_ms: float  # slowest rank's reader wait per step
    median_reader_ms: float  # the median rank's (the slowest rank's when ranks are not recorded)
    median_rank_ms: float  # per-rank step times: the median rank's and the slowest rank's
    max_rank_ms: float
    throughput: float
    unit: str
    units_per_rank_step: float
    comm_bytes: float | None  # bytes each rank all-reduces per step (None: not recorded)
    comm_buckets: float | None  # all-reduce calls per step
    threads: int | None
    cores: int | None  # usable CPU threads of the host
    emulated: bool  # nodes are network namespaces of one host (they share its cores)
    gpu: bool
    rate_gbit: float | None
    traffic: gradbytes.Traffic | None = None  # what a step really sends (gradbytes)
    excluded: int = 0  # runs left out as throughput outliers (stability.excluded)
    transport: str | None = None  # the network's, as recorded (tcp, rdma)
    nics: int = 1  # NICs a node uses for the network (rails; network.nics)
    config: dict = dataclasses.field(default_factory=dict)  # the first run's (its work's identity)
    topology: dict | None = None  # the record's: an nvidia-smi matrix, or a published intra_node
    gpu_model: str | None = None  # GPU name (env.gpus, or a published config.gpu)
    sync_every: int = 1  # micro-steps between all-reduces (published.sync_every)
    source: str | None = None  # a published table's name; None for runs measured here
    order: object = None  # overlap.Order of its gradients when known (registry or the record)
    grad_tensors: int | None = None  # trainable gradient tensors (metrics.grad_tensors)
    files: tuple = ()  # the results files its runs came from (a record's "_file", set by the reader)
    sockets: int = 0  # TCP streams a connection (network.sockets: NCCL_SOCKET_NTHREADS x NSOCKS_PERTHREAD)
    measured_parts: dict | None = None  # the runs' own step breakdown as the model's parts (measured_parts)
    mfu: float | None = None  # mean model FLOPs utilisation of its runs (metrics.mfu)
    from_node: bool = False  # a 1-GPU record derived from a 1-node run (published.from_node)

    @property
    def control(self) -> bool:
        return self.method == CONTROL

    @property
    def label(self) -> str:
        return " ".join(str(p) for p in (self.benchmark, self.preset or "", self.method,
                                          self.network or "local", self.shape) if p != "")

    @property
    def framework(self) -> str | None:
        return self.config.get("framework")

    @property
    def precision(self) -> str | None:
        return self.config.get("precision")


@dataclasses.dataclass
class CommCell:
    network: str | None
    shape: Shape
    link: alphabeta.Link
    rate_gbit: float | None


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


# Config keys that change how often a step synchronises, not what a micro-step computes: a
# strong-scaling table accumulates fewer micro-batches a device as it grows (published.sync_every).
SYNC_KEYS = ("grad_merge_steps",)


def _work(record: dict) -> tuple:
    """What a control or a 1-device run must share with a cell: experiment.comparable (source,
    benchmark, preset, unit, Paddle build, device, host, config without method, runtime and the
    accumulation steps: precision, framework and batch are in it)."""
    fields = experiment.of(record).fields()
    fields["config"] = {k: v for k, v in fields["config"].items() if k not in SYNC_KEYS}
    return experiment.comparable(dict(fields, unit=record["metrics"]["unit"]))


def _rank_steps(metrics: dict) -> list[float]:
    """Per-rank mean step times in ms: recorded, else from each rank's measured-window time."""
    if metrics.get("rank_step_ms"):
        return [float(v) for v in metrics["rank_step_ms"]]
    steps = metrics.get("measured_steps") or 0
    elapsed = metrics.get("rank_elapsed_s") or []
    return [1000.0 * e / steps for e in elapsed] if steps else [metrics["step_time_ms"]]


MEASURED_PARTS = ("compute_ms", "exposed_comm_ms", "imbalance_ms", "reader_ms")


def measured_parts(metrics: dict) -> dict:
    """A run's step breakdown (metrics.step_breakdown, train/phases.py) as the model's parts, ms a
    step: compute (forward, backward, optimizer and what no part covers) and reader of the median
    rank; exposed communication, the median rank's time inside gradient communication on its
    step's thread less its wait for peers; imbalance, the ranks' mean wait for the last to arrive
    (in a synchronised job the slowest rank waits for none, the others for it). Nones without one."""
    block = metrics.get("step_breakdown") or {}
    rows = block.get("ranks") or []
    if not rows or block.get("family") == "ps":  # a PS worker's parts (train/ps/marks.py) are not these
        return dict.fromkeys(MEASURED_PARTS)
    compute = [r["forward"] + r["backward"] + r["optimizer"] + r["other"] for r in rows]
    exposed = [max(0.0, r["comm_blocking"] - min(r["comm_wait"], r["comm_blocking"])) for r in rows]
    return {"compute_ms": statistics.median(compute), "exposed_comm_ms": statistics.median(exposed),
            "imbalance_ms": statistics.fmean(r["comm_wait"] for r in rows),
            "reader_ms": statistics.median(r["reader"] for r in rows)}


def _run_figures(record: dict) -> dict:
    m = record["metrics"]
    ranks = _rank_steps(m)
    runtime = record["config"].get("runtime") or {}
    reader = m.get("reader_time_ms") or 0.0
    return {"step_ms": m["step_time_ms"], "reader_ms": reader,
            "median_reader_ms": statistics.median(m.get("rank_reader_ms") or [reader]),
            "median_rank_ms": statistics.median(ranks), "max_rank_ms": max(ranks),
            "throughput": m["throughput"],
            "units_per_rank_step": m["throughput"] * m["step_time_ms"] / 1e3 / record["world_size"],
            "comm_bytes": m.get("comm_bytes_per_step"), "comm_buckets": m.get("comm_buckets_per_step"),
            "threads": m.get("omp_num_threads"),
            "cores": ((record.get("env") or {}).get("cpu") or {}).get("usable_threads"),
            "gpu": str(runtime.get("device", "cpu")).startswith("gpu"), "mfu": m.get("mfu"),
            **{f"measured_{p}": v for p, v in measured_parts(m).items()}}


def _cell(runs: list[dict]) -> Cell:
    values = [r["metrics"]["throughput"] for r in runs]
    keep = stability.kept_indexes(values, stability.figure_quiet([r["metrics"] for r in runs]))
    members = [runs[i] for i in keep]  # stability.kept, as records: disturbed runs and outliers left out
    flagged = [r for r in runs if r not in members]
    exp = experiment.of(members[0])
    figures = [_run_figures(r) for r in members]
    mean = {name: _mean(f[name] for f in figures) for name in figures[0]}
    steps = [f["step_ms"] for f in figures]
    net = members[0].get("network") or {}
    first = members[0]
    return Cell(exp.benchmark, exp.preset, exp.method, exp.network, Shape(exp.nodes, exp.devices_per_node),
                _work(members[0]), len(members),
                mean["step_ms"], _step_std(steps, members),
                mean["reader_ms"], mean["median_reader_ms"], mean["median_rank_ms"], mean["max_rank_ms"], mean["throughput"],
                members[0]["metrics"]["unit"], mean["units_per_rank_step"], mean["comm_bytes"],
                mean["comm_buckets"], figures[0]["threads"], figures[0]["cores"],
                bool(net.get("emulated")), figures[0]["gpu"], net.get("rate_gbit"),
                gradbytes.of_record(first["config"], first["metrics"], mean["comm_bytes"],
                                    mean["comm_buckets"], exp.world_size), len(flagged), net.get("transport"),
                int(net.get("nics") or 1), first["config"], first.get("topology"), _gpu_model(first),
                published.sync_every(first), exp.source, _order(first),
                (first.get("metrics") or {}).get("grad_tensors"),
                tuple(sorted({r["_file"] for r in members if r.get("_file")})), int(net.get("sockets") or 0),
                measured_parts=None if mean["measured_compute_ms"] is None else
                {p: mean[f"measured_{p}"] for p in MEASURED_PARTS}, mfu=mean["mfu"],
                from_node=published.from_node(first))


def _gpu_model(record: dict) -> str | None:
    names = sorted({g.get("name") or "" for g in ((record.get("env") or {}).get("gpus") or [])} - {""})
    return " + ".join(names) or (record.get("config") or {}).get("gpu")


def _order(record: dict):
    """The gradient order (overlap.Order) of the record's model: given in it, else the registry's."""
    model = published.model_of(record)
    return overlap.given(record.get("metrics") or {}) or (overlap.registered(*model) if model else None)


def _step_std(steps: list[float], members: list[dict]) -> float:
    """Std of the step over the runs; one published figure: from its published throughput std."""
    if len(steps) > 1:
        return statistics.stdev(steps)
    metrics = members[0]["metrics"]
    if metrics.get("throughput_std") and metrics.get("throughput"):
        return steps[0] * metrics["throughput_std"] / metrics["throughput"]
    return 0.0


def _comm_fit(record: dict) -> tuple[float, float] | None:
    """(alpha_us, bandwidth_GBps) of all_reduce in one float32 comm run: the record's own fit
    (metrics.ops.all_reduce, or the top level when all_reduce is the run's headline op), else a
    fit of its all_reduce rows; None when the run did not measure all_reduce in float32."""
    metrics = record.get("metrics") or {}
    if record["config"].get("dtype", "float32") != "float32":
        return None
    part = (metrics.get("ops") or {}).get(alphabeta.ALLREDUCE)
    if part is None and metrics.get("op", record["method"]) == alphabeta.ALLREDUCE:
        part = metrics
    rows = [r for r in metrics.get("rows") or [] if r.get("op", alphabeta.ALLREDUCE) == alphabeta.ALLREDUCE]
    if part and part.get("alpha_us") is not None and part.get("bandwidth_GBps"):
        return float(part["alpha_us"]), float(part["bandwidth_GBps"])
    return alphabeta.fit_rows(rows, record["world_size"]) if rows else None


def _comm_groups(records: list[dict], fit_of=None) -> dict:
    """(network, nodes, devices per node) -> [(fit, record)] of the all_reduce comm runs."""
    groups: dict[tuple, list] = {}
    for record in records:
        if record["world_size"] < 2:
            continue  # one rank sends nothing: no fit
        try:
            fit = (fit_of or _comm_fit)(record)
        except alphabeta.FitError as err:
            raise alphabeta.FitError(f"comm record {record['id']}: {err}") from None
        if fit is not None:
            key = (experiment.network_name(record.get("network")), record["nodes"],
                   record["devices_per_node"])
            groups.setdefault(key, []).append((fit, record))
    return groups


def _comm_cell(key: tuple, members: list) -> CommCell:
    network, nodes, per_node = key
    shape = Shape(nodes, per_node)
    source = f"comm record{'s' if len(members) > 1 else ''} {network or 'local'} {shape}, n={len(members)}"
    rows = [row for _, r in members if r["config"].get("dtype", "float32") == "float32"
            for row in (r.get("metrics") or {}).get("rows") or []]
    link = alphabeta.pooled_link([fit for fit, _ in members], shape.world_size, source, rows)
    rate = (members[0][1].get("network") or {}).get("rate_gbit")
    return CommCell(network, shape, link, rate)


def _explained(record: dict) -> bool:
    """A run the breakdown can take apart: collective, successful, with a step time (records
    without one, hand-made or of an older schema, have nothing to explain); a published record's
    only once derived (perfmodel/published, --published)."""
    return (record.get("error") is None and record["mode"] == "collective"
            and (not record.get("source") or (record.get("metrics") or {}).get("derived"))
            and (record.get("metrics") or {}).get("step_time_ms") is not None)


class Pool:
    """Records pooled once: the cells of any part of them (a --validate selector's fitted and
    held-out records) hold the same runs as the whole's, so each cell is built once and shared."""

    def __init__(self) -> None:
        self._made: dict = {}  # (kind, the runs' ids) -> the Cell or CommCell of those runs

    def __call__(self, records: list[dict]) -> tuple[list[Cell], list[CommCell]]:
        """Training cells (collective, successful runs) and all_reduce comm cells of `records`."""
        groups: dict = {}
        for record in records:  # repeats pool as in every report: one group per experiment
            if _explained(record):
                groups.setdefault(experiment.of(record), []).append(record)
        cells = [self._once("cell", members, lambda m=members: _cell(m)) for members in groups.values()]
        comm = _comm_groups([r for r in records if r["mode"] == "comm" and r.get("error") is None],
                            lambda r: self._once("fit", [r], lambda: _comm_fit(r)))
        return cells, [self._once("comm", [r for _, r in members], lambda k=key, m=members: _comm_cell(k, m))
                       for key, members in comm.items()]

    def _once(self, kind: str, members: list[dict], make):
        key = (kind, tuple(id(r) for r in members))
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]


def pool(records: list[dict]) -> tuple[list[Cell], list[CommCell]]:
    """Training cells (collective, successful runs) and all_reduce comm cells of `records`."""
    return Pool()(records)


# ---- matching ---------------------------------------------------------------------------------

def same_work(a: Cell, b: Cell) -> bool:
    """Same model and per-rank work on the same kind of machine (method and runtime aside)."""
    return a.work == b.work


def find_control(cell: Cell, cells: list[Cell]) -> tuple[Cell | None, str]:
    """The method=none control of the same work and shape; same network preferred (a control
    sends no gradients, so another network's control of the same shape is the fallback)."""
    found = [c for c in cells if c.control and same_work(c, cell) and c.shape == cell.shape]
    for c in found:
        if c.network == cell.network:
            return c, f"method=none control, {c.shape}"
    if found:
        return found[0], f"method=none control, {found[0].shape}, network {found[0].network or 'local'}"
    return None, ""


def find_single(cell: Cell, cells: list[Cell]) -> Cell | None:
    """The 1-device run of the same work: the same method's, else any training method's; at the
    most threads (a lone process's default: 1-thread runs are for the thread-scaling curve)."""
    found = [c for c in cells if c.shape.world_size == 1 and not c.control and same_work(c, cell)]
    same_method = [c for c in found if c.method == cell.method]
    return max(same_method or found, key=lambda c: (c.threads or 0, c.runs), default=None)


def _nearest(candidates: list[CommCell], ranks: int) -> CommCell | None:
    return min(candidates, key=lambda c: (abs(c.shape.world_size - ranks), -c.shape.world_size),
               default=None)


def known_rate(network: str | None, comm: list[CommCell], cells: list[Cell] = ()) -> float | None:
    """The shaped rate (Gbit/s) of a network name: as recorded with it, else the profile's."""
    for item in list(comm) + list(cells):
        if item.network == network and item.rate_gbit:
            return item.rate_gbit
    rate = PROFILES.get(network or "")
    return rate / 1e9 if rate else None


def _flat(network, ranks: int, intra: bool, comm: list[CommCell], rate_gbit=None):
    """A ring of `ranks` ranks, all in one node (intra) or one per node: the nearest measured ring
    of the same kind and network, re-sized; or a link known by its rate with a measured latency."""
    kind = [c for c in comm if (c.shape.nodes == 1) == intra
            and (c.shape.devices_per_node == 1 or intra)]
    if rate_gbit is None:
        # inside a node the network profile does not matter: prefer its own, then any
        same = [c for c in kind if c.network == network] or (kind if intra else [])
        found = _nearest(same, ranks)
        if found:
            return found.link.at(ranks), ""
        rate_gbit = None if intra else known_rate(network, comm)
        if rate_gbit is None:
            where = "intra-node" if intra else f"network {network or 'local'}"
            return None, f"no all_reduce comm record for {where} and no known link rate"
    latency = _nearest(kind, ranks)
    hop = latency.link.hop_alpha_us if latency else None
    note = (f"latency from comm record {latency.network or 'local'} {latency.shape}" if latency
            else "latency unknown")
    return alphabeta.rate_link(rate_gbit, ranks, hop, f"link rate {rate_gbit:g} Gbit/s, {note}"), ""


def link_for(network: str | None, shape: Shape, comm: list[CommCell], rate_gbit: float | None = None,
             backend: str = "gloo"):
    """(link, problem): the all-reduce cost model for `shape` on `network` (or on a link of
    `rate_gbit`). An exact comm record of the shape and network wins; else one node or one device
    per node is a ring fitted at another size; else, across nodes of several devices, NCCL's
    rings or trees over all GPUs (backend nccl: perfmodel/nccl.py, also for one GPU a node), or for
    gloo an intra-node then an inter-node all-reduce (as the fitted cells measured it)."""
    if shape.world_size == 1:
        return None, "one device: no all-reduce"
    exact = [c for c in comm if c.network == network and c.shape == shape]
    if exact and rate_gbit is None:
        return exact[0].link, ""
    if shape.nodes == 1 or (shape.devices_per_node == 1 and backend != "nccl"):
        return _flat(network, shape.world_size, shape.nodes == 1, comm, rate_gbit)
    if shape.devices_per_node == 1:
        intra, problem = alphabeta.Link(0.0, float("inf"), 1, "one GPU a node"), ""
    else:
        intra, problem = _flat(network, shape.devices_per_node, True, comm)
    inter, problem2 = _flat(network, shape.nodes, False, comm, rate_gbit)
    if intra is None or inter is None:
        return None, problem or problem2
    if backend == "nccl":
        return nccl.NcclLink(intra, inter, shape.nodes, shape.devices_per_node), ""
    return alphabeta.Hierarchical(intra, inter), ""
