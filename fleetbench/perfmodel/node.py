"""A GPU node of a work: the ring inside it and what sharing the node costs a GPU's compute, from
the records: its topology and its 1-node run, against the 1-GPU run (docs/guide/explain.md, "The node").

The 1-node run of d GPUs loses  step(node) - step(1 GPU)  per micro-step to two things the model
keeps apart: the node's all-reduce (what of it backward does not hide) and node sharing (d GPUs
sharing the host's CPUs, memory, PCIe and power: data loading above all). One run cannot tell
them apart, so one is taken from elsewhere:

1. the link known (a comm record of one node, or the topology: a published `topology.intra_node`,
   or an nvidia-smi matrix with the GPU model): the node's exposure is predicted on it and the
   rest is node sharing, a factor on every micro-step of the work's cells of d GPUs a node
   (below 1 when the node run is super-linear, which is said);
2. else the link derived from the 1-node run, with no sharing: a post-backward method (bsp)
   exposes its whole all-reduce, bus bandwidth = 2(d-1)/d x S / exposed; an overlapped one exposes
   the tail the overlap model gives, solved for the bandwidth (overlap.solve_bandwidth);
3. no 1-node run exposes anything (super-linear or fully hidden), or none exists: the topology's
   link if known, else PCIe of the GPU's generation as the assumed floor of a node's ring; said.
   With no 1-node run at all, a prediction (not a breakdown) assumes the node-sharing prior
   (`prior`, fitted on other tables' 1-node cells by perfmodel/fit_node_prior.py; said).

Sharing and link carry their ranges: the node and 1-GPU runs' spread, sharing between its value
and none, a topology link between 70% and 100% of its data rate (NCCL's rings reach ~75-90% of
NVLink's in nccl-tests).
"""
from __future__ import annotations

import dataclasses
import math
import statistics

from fleetbench.perfmodel import alphabeta, manifest, nccl, overlap, ranges
from fleetbench.perfmodel import cells as cellmod
from fleetbench.perfmodel.cells import Cell

TOPOLOGY_SHARE = (0.85, 0.7, 1.0)  # (point, slow end, fast end) of a link's data rate NCCL reaches
DERIVED = "derived from the 1-node run"


@dataclasses.dataclass
class Node:
    link: alphabeta.Link | None  # the ring of per_node GPUs, None: a comm record of the node serves
    sharing: float  # factor on a micro-step's compute for cells of per_node GPUs a node
    per_node: int
    notes: list
    one_gpu_alone: bool = False  # no 1-node run of several GPUs: sharing unknown (`prior`)


def _runs(cell: Cell, cells: list[Cell]) -> list[Cell]:
    """The work's 1-node runs of several GPUs: post-backward methods first, then most GPUs."""
    runs = [c for c in cells if c.gpu and c.shape.nodes == 1 and c.shape.devices_per_node > 1
            and not c.control and c.comm_bytes and cellmod.same_work(c, cell)]
    return sorted(runs, key=lambda c: (c.method not in cellmod.POST_BACKWARD, -c.shape.devices_per_node,
                                       c.network != cell.network))


def topology_link(cell: Cell, per_node: int, bound: str) -> tuple[alphabeta.Link | None, str]:
    """The node's ring from the records' topology: a published intra_node (with intra_GBps or the
    GPU model's rate), or an nvidia-smi matrix read with the GPU model (nccl.from_matrix)."""
    topo = cell.topology or {}
    kind, links = topo.get("intra_node"), None
    if kind is None and topo.get("links"):
        found = nccl.from_matrix(topo, cell.gpu_model)
        kind, links = found if found else (None, None)
    if kind not in nccl.INTRA_LINKS:
        return None, ""
    rate, how = (float(topo["intra_GBps"]), f"{topo['intra_GBps']:g} GB/s as the record gives") \
        if topo.get("intra_GBps") else nccl.intra_GBps(kind, cell.gpu_model, links)
    if rate is None:
        return None, how
    share = ranges.pick(bound, TOPOLOGY_SHARE[2], TOPOLOGY_SHARE[0], TOPOLOGY_SHARE[1])
    hop = nccl.DEFAULT_HOP_US["pcie" if kind == "pcie" else "nvlink"]
    source = f"topology: {kind}, {how}, x{share:g} reached by NCCL; hop latency {hop:g} us (NCCL's model)"
    return alphabeta.Link(hop * 2 * (per_node - 1), rate * share, per_node, source), source


def assumed_link(cell: Cell, per_node: int, bound: str) -> tuple[alphabeta.Link, str]:
    rate, how = nccl.intra_GBps("pcie", cell.gpu_model)
    share = ranges.pick(bound, TOPOLOGY_SHARE[2], TOPOLOGY_SHARE[0], TOPOLOGY_SHARE[1])
    source = (f"assumed: no topology in the records, {how} taken as the node's ring (the slowest link "
              f"a GPU node has), x{share:g}")
    hop = nccl.DEFAULT_HOP_US["pcie"]
    return alphabeta.Link(hop * 2 * (per_node - 1), rate * share, per_node, source), source


def _exposure_ms(run: Cell, link: alphabeta.Link, backward_ms: float, bound: str) -> float:
    """What the run's all-reduce exposes per micro-step on `link` (overlap model for overlapped
    methods with a known gradient order, the whole all-reduce otherwise)."""
    total = link.allreduce_ms(run.comm_bytes * run.sync_every, run.comm_buckets * run.sync_every)
    if run.method not in overlap.OVERLAPPED or run.order is None:
        return total / run.sync_every
    calls = overlap.buckets(run.order, run.comm_bytes * run.sync_every / run.order.total,
                            overlap.bucket_caps(run.method, run.config))
    return overlap.exposed_ms(calls, backward_ms, lambda b: link.allreduce_ms(b, 1)) / run.sync_every


def _steps(run: Cell, single: Cell, bound: str) -> tuple[float, float]:
    """(node step, 1-GPU step) per micro-step at the bound: the runs' spread moves them apart."""
    return (ranges.pick(bound, run.step_ms - run.step_std_ms, run.step_ms, run.step_ms + run.step_std_ms),
            ranges.pick(bound, single.step_ms + single.step_std_ms, single.step_ms,
                        single.step_ms - single.step_std_ms))


def derive(run: Cell, single: Cell, bound: str) -> tuple[alphabeta.Link | None, str]:
    """The node's ring from its 1-node run with no sharing (module doc, 2); None: nothing exposed."""
    node_ms, single_ms = _steps(run, single, bound)
    exposed = node_ms - single_ms
    d = run.shape.devices_per_node
    backward = single_ms * ranges.pick(bound, *ranges.ordered(overlap.BACKWARD_SHARE, fast_high=True))
    if exposed <= 0:
        return None, f"{exposed / single_ms:+.1%}"
    if run.method in overlap.OVERLAPPED and run.order is not None:
        bandwidth = overlap.solve_bandwidth(exposed, lambda b: _exposure_ms(
            run, alphabeta.Link(0.0, b, d, ""), backward, bound))
        how = "its overlapped all-reduce's tail solved for the bandwidth (overlap model)"
    else:
        bandwidth = alphabeta.allreduce_factor(d) * run.comm_bytes / (exposed * 1e6)
        how = "its whole all-reduce exposed"
    if bandwidth is None:
        return None, f"{exposed:.1f} ms exposed, more than the overlap model lets an all-reduce expose"
    source = (f"{DERIVED} {run.label}: {exposed:.1f} ms a micro-step over the 1-GPU run, "
              f"{how}; hop latency unknown")
    return alphabeta.Link(0.0, bandwidth, d, source, latency_known=False), source


def _sharing(run: Cell, single: Cell, link: alphabeta.Link, bound: str) -> tuple[float, str]:
    """Node sharing: (node step - its predicted exposure) / 1-GPU step, per micro-step."""
    node_ms, single_ms = _steps(run, single, bound)
    backward = single_ms * ranges.pick(bound, *ranges.ordered(overlap.BACKWARD_SHARE, fast_high=True))
    exposure = _exposure_ms(run, link, backward, bound)
    factor = (node_ms - exposure) / single_ms
    point = factor if bound == ranges.POINT else None
    factor = ranges.pick(bound, min(factor, 1.0), factor, max(factor, 1.0))
    if point is None:
        return factor, ""
    if point < 1:
        return factor, (f"super-linear 1-node run: {run.label} is {1 - point:.1%} faster than "
                        f"{run.shape.devices_per_node} x the 1-GPU run beyond its predicted all-reduce "
                        f"({exposure:.1f} ms): node sharing x{point:.3f} carried to the cells of "
                        f"{run.shape.devices_per_node} GPUs a node (range to x1)")
    return factor, (f"node sharing x{point:.3f} from the 1-node run {run.label} ({node_ms:.1f} ms a micro-step "
                    f"against {single_ms:.1f} x the 1-GPU run, {exposure:.1f} ms of it the all-reduce on "
                    "the node's link), on every cell of as many GPUs a node")


def of_work(cell: Cell, cells: list[Cell], node_comm: alphabeta.Link | None, bound: str) -> Node:
    """The node of `cell`'s GPU work (module doc); `node_comm`: a comm record's ring of one node."""
    single = cellmod.find_single(cell, cells)
    runs = _runs(cell, cells)
    d = runs[0].shape.devices_per_node if runs else cell.shape.devices_per_node
    notes: list[str] = []
    link, source = (node_comm, "from a comm record of one node") if node_comm else topology_link(cell, d, bound)
    if link is None and runs and single is not None:
        for run in runs:  # post-backward first: it exposes its whole all-reduce
            derived, why = derive(run, single, bound)
            if derived is not None:
                return Node(derived, 1.0, d, notes + [f"intra-node link {derived.source}"])
            notes.append(f"1-node run {run.label}: no link derivable ({why} against the 1-GPU run: "
                         "super-linear or fully hidden)")
    if link is None:
        link, source = assumed_link(cell, d, bound)
    notes.append(f"intra-node link {source}")
    if not runs:
        notes.append("no 1-node run of several GPUs of this work: node sharing (data loading, the host) "
                     "not measured")
    sharing = 1.0
    if runs and single is not None:
        sharing, note = _sharing(runs[0], single, link.at(d), bound)
        notes += [note] if note else []
    # a 1-GPU record derived from the 1-node run already carries that node's sharing: no prior on it
    alone = not runs and not (single is not None and single.from_node)
    return Node(None if node_comm else link, sharing, d, notes, one_gpu_alone=alone)


# ---- the node-sharing prior: a prediction from one GPU alone ----------------------------------------
# (docs/guide/explain.md, "A node-sharing prior for a prediction from one GPU alone"). With no 1-node run
# nothing says what d GPUs sharing a host lose (data loading, the host's cores, memory and PCIe), and
# assuming nothing made every such prediction too fast (the held-out single-node tables). Each
# doubling of the GPUs on a host halves each GPU's share of it, so the loss is taken per doubling:
#     sharing(d) = 1 + c x log2(d)
# c: (median, 10th, 90th percentile) of each fitting cell's (measured / predicted step - 1) / log2(d),
# predicted with the prior off; the cells: nodes = 1, d > 1 of PRIOR_TABLES at --validate world_size=1
# (perfmodel/fit_node_prior.py computes it; tests hold the two together). Not ddl-benchmarks: it gives no
# node topology, so its 1-node errors from one GPU mix an assumed PCIe link with sharing.
PRIOR = (0.0161, -0.0076, 0.0702)  # 121 cells of the 11 PRIOR_TABLES (python -m fleetbench.perfmodel.fit_node_prior)
PRIOR_TABLES = manifest.node_prior()  # node_prior: true in results/reference/manifest.yaml


def _prior_factors(per_node: int) -> tuple[float, float, float]:
    """(fast, point, slow) sharing factors for `per_node` GPUs a node."""
    point, low, high = (1 + c * math.log2(per_node) for c in PRIOR)
    return min(low, high), point, max(low, high)


def prior(per_node: int, bound: str) -> tuple[float, str]:
    """(factor at `bound`, note) of the prior for `per_node` GPUs sharing a node."""
    fast, point, slow = _prior_factors(per_node)
    note = (f"node sharing x{point:.3f} assumed: no 1-node run of this work, so the node-sharing prior "
            f"1 + {PRIOR[0]:.4f} x log2({per_node} GPUs a node) (fitted on the 1-node cells of {len(PRIOR_TABLES)} "
            f"tables, node.PRIOR_TABLES; x{fast:.3f} to x{slow:.3f} in its range, which widens the 80% range)")
    return ranges.pick(bound, fast, point, slow), note


def prior_spread(per_node: int) -> tuple[float, float]:
    """The prior's fast and slow ends relative to its point (what widens an 80% range)."""
    fast, point, slow = _prior_factors(per_node)
    return fast / point, slow / point


def prior_fit(rows: list[dict]) -> tuple[float, float, float]:
    """PRIOR from validation rows predicted with the prior off: their 1-node cells of d > 1 GPUs."""
    values = sorted((r["measured_step_ms"] / r["predicted_step_ms"] - 1) / math.log2(r["devices_per_node"])
                    for r in rows if r.get("predicted_step_ms") and r.get("measured_step_ms")
                    and r["nodes"] == 1 and r["devices_per_node"] > 1)
    cuts = statistics.quantiles(values, n=10, method="inclusive")
    return statistics.median(values), cuts[0], cuts[-1]


# A node run's exposure within this share of its step (or its runs' spread) of what the overlap
# model gives at the point is no evidence about backward: node sharing alone moves a step that much
# (ddl-benchmarks' 4-GPU node runs 1% either side of 4 x one GPU across methods that hide everything).
NOISE_SHARE = 0.01


def backward_share(ref: Cell, method: str, cells: list[Cell], node_link, bound: str) -> tuple[float, str]:
    """Backward's share of a micro-step for `method` on `ref`'s work: learned from the work's 1-node
    run of that method when the node's link was derived from another method's 1-node run (so the
    node has no sharing, module doc 2, and this run's loss is all exposure) and the run exposed more
    (or less) than the overlap model says beyond noise (NOISE_SHARE); else overlap.BACKWARD_SHARE
    (a link from a comm record or the topology leaves the node's loss to node sharing). The share
    at which the model exposes what the run exposed, by bisection within [0, 2/3]."""
    fast, point, slow = ranges.ordered(overlap.BACKWARD_SHARE, fast_high=True)
    default = ranges.pick(bound, fast, point, slow)
    runs = [c for c in _runs(ref, cells) if c.method == method and c.order is not None]
    single = cellmod.find_single(ref, cells)
    derived = node_link is not None and node_link.source.startswith(DERIVED)
    if not runs or single is None or not derived or runs[0].label in node_link.source:
        return default, ""
    run = runs[0]
    node_ms, single_ms = _steps(run, single, bound)
    measured = node_ms - single_ms
    link = node_link.at(run.shape.devices_per_node)
    exposure = lambda share: _exposure_ms(run, link, single_ms * share, bound)  # noqa: E731
    noise = max(NOISE_SHARE * single_ms, run.step_std_ms + single.step_std_ms)
    if abs(measured - exposure(default)) <= noise:
        return default, ""
    if measured <= exposure(fast):
        share = fast
    elif measured >= exposure(0.0):
        share = 0.0
    else:
        lo, hi = 0.0, fast
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if exposure(mid) > measured else (lo, mid)
        share = (lo + hi) / 2
    return share, (f"backward's share {share:.2f} of the step learned from the 1-node {method} run {run.label} "
                   f"({measured:.1f} ms exposed a micro-step on the node's link, the model says "
                   f"{exposure(default):.1f} at {default:.2f})")


def method_cost(ref: Cell, method: str, cells: list[Cell], node_link, bound: str) -> tuple[float, str]:
    """(ms a sync, note) `method` costs of its own on `ref`'s work: what its 1-node run loses beyond
    its whole all-reduce on a node link derived from another method's 1-node run (past the noise, as
    backward_share), else 0. No overlap exposes more than everything, so the rest is work the method
    does each step that no link explains (ByteScheduler's: its 1-node runs are slower than bsp's,
    which hides nothing). Carried to every cell of the method, once a sync."""
    runs = [c for c in _runs(ref, cells) if c.method == method]
    single = cellmod.find_single(ref, cells)
    derived = node_link is not None and node_link.source.startswith(DERIVED)
    if not runs or single is None or not derived or runs[0].label in node_link.source:
        return 0.0, ""
    run = runs[0]
    node_ms, single_ms = _steps(run, single, bound)
    link = node_link.at(run.shape.devices_per_node)
    whole = link.allreduce_ms(run.comm_bytes * run.sync_every, run.comm_buckets * run.sync_every) / run.sync_every
    excess = node_ms - single_ms - whole
    if excess <= max(NOISE_SHARE * single_ms, run.step_std_ms + single.step_std_ms):
        return 0.0, ""
    per_sync = excess * run.sync_every
    return per_sync, (f"the 1-node {method} run {run.label} loses {excess:.1f} ms a micro-step beyond its whole "
                      f"all-reduce on the node's link: {per_sync:.1f} ms a sync of the method's own, on its cells")

