"""A prediction started from the user's own multi-node runs: the largest measured multi-node cell of
the same work and method (the anchor) carries forward what the model does not price, the
framework's multi-node cost (docs/guide/explain.md, "Anchors").

The model's step at the anchor's own shape leaves a residual, measured - modelled. Its part beyond
the residual of the same work's 1-node cell (what one node already misses) grows with the steps a
collective takes across nodes: a ring's inter-node steps 2(n - 1) (gloo, CPU), a tree's depth
ceil(log2 n) (GPU nodes: `_shape`). At n nodes

    carried(n) = r1 + (r_anchor - r1) x g(n) / g(anchor's nodes)

is added to the model's step, so the prediction at the anchor's own shape is the anchor. Its range
is the inputs' range moved by the same cost, joined with the anchored error term
(perfmodel/calibration). Without a multi-node anchor the framework's multi-node cost is unknown,
and the prediction says what it cost on the calibration tables.
"""
from __future__ import annotations

import dataclasses
import math

from fleetbench.perfmodel import calibration, node, ranges
from fleetbench.perfmodel import cells as cellmod
from fleetbench.perfmodel.cells import Cell, Shape


@dataclasses.dataclass(frozen=True)
class Anchor:
    """The measured multi-node cell a prediction starts from, and the cost it carries."""
    cell: str
    nodes: int
    measured_ms: float
    modelled_ms: float
    one_node_residual_ms: float  # the same work's 1-node cell: measured - modelled (0 without one)
    shape: str  # ring or tree: how the carried cost grows with nodes

    def growth(self, nodes: int) -> float:
        """The collective's steps across `nodes` nodes, as a share of the anchor's."""
        return _steps(self.shape, nodes) / _steps(self.shape, self.nodes)

    def carried_ms(self, nodes: int) -> float:
        residual = self.measured_ms - self.modelled_ms
        return self.one_node_residual_ms + (residual - self.one_node_residual_ms) * self.growth(nodes)

    def note(self, nodes: int) -> str:
        return (f"anchor {self.cell}: measured {self.measured_ms:.1f} ms, the model {self.modelled_ms:.1f}; its "
                f"multi-node cost {self.measured_ms - self.modelled_ms - self.one_node_residual_ms:+.1f} ms "
                f"(beyond the 1-node cell's {self.one_node_residual_ms:+.1f}) carried as a {self.shape}'s steps "
                f"across nodes, x{self.growth(nodes):.2f} at {nodes} nodes: {self.carried_ms(nodes):+.1f} ms a step")


def _steps(shape: str, nodes: int) -> float:
    if nodes <= 1:
        return 0.0
    return 2.0 * (nodes - 1) if shape == "ring" else float(math.ceil(math.log2(nodes)))


def find(method: str, network: str | None, ref: Cell, cells: list[Cell]) -> Cell | None:
    """The largest measured multi-node cell of `ref`'s work and `method` on `network`: another
    network's residual holds that link model's error too, not the framework's cost alone."""
    found = [c for c in cells if not c.control and c.method == method and c.shape.nodes > 1
             and c.network == network and cellmod.same_work(c, ref) and c.step_ms]
    return max(found, key=lambda c: (c.shape.nodes, c.shape.world_size), default=None)


def _name(cell: Cell) -> str:
    """The anchor as a reader finds it in the records: its label and work."""
    work = [str(cell.config[k]) for k in ("precision", "batch_size") if cell.config.get(k)]
    return f"{cell.label}" + (f" [{', '.join(work)}]" if work else "")


def _one_node(anchor: Cell, cells: list[Cell]) -> Cell | None:
    return next((c for c in cells if not c.control and c.method == anchor.method and c.shape.nodes == 1
                 and c.shape.devices_per_node == anchor.shape.devices_per_node and cellmod.same_work(c, anchor)
                 and c.step_ms), None)


def _shape(ref: Cell) -> str:
    """How the carried cost grows: gloo rings (CPU); across GPU nodes as a tree's depth, whatever
    NCCL picks for the bytes: on the calibration tables a ring's steps carried too much (from 2-node
    anchors, 62% of their 4+-node cells within 15% against 84% as a tree's depth: docs/validation/explain.md)."""
    return "tree" if ref.gpu else "ring"


def measure(target, ref: Cell, cells: list[Cell], comm: list, cal: dict, model) -> Anchor | None:
    """The anchor of `target` (a predict.Target) among `cells`, with its residuals; `model(target,
    ref, cells, comm, cal)` is predict.predict (passed in: predict imports nothing of this)."""
    anchor = find(target.method, target.network, ref, cells)
    if anchor is None:
        return None

    def modelled(cell: Cell) -> float | None:
        own = dataclasses.replace(target, network=cell.network, shape=Shape(cell.shape.nodes, cell.shape.devices_per_node),
                                  sync_every=cell.sync_every, rate_gbit=None, transport=None, efficiency=None, nics=None,
                                  network_rate=(cell.rate_gbit, cell.transport, cell.nics, cell.sockets)
                                  if cell.rate_gbit else None)
        return model(own, ref, cells, comm, cal)["predicted_step_ms"]

    at_anchor = modelled(anchor)
    if at_anchor is None:
        return None
    single = _one_node(anchor, cells)
    at_single = modelled(single) if single is not None else None
    residual = single.step_ms - at_single if at_single is not None else 0.0
    return Anchor(_name(anchor), anchor.shape.nodes, anchor.step_ms, at_anchor, residual,
                  _shape(ref))


def carry(out: dict, found: Anchor | None, target, ref: Cell) -> dict:
    """The prediction `out` (predict.predict_range's) started from `found`: its step moved by the
    carried cost, its range by the same, joined with the anchored error term; without an anchor, a
    multi-node GPU prediction says the framework's multi-node cost is unknown."""
    out = dict(out, anchor=None, range_calibration=None)
    step = out.get("predicted_step_ms")
    if step is None:
        return out
    nodes = target.shape.nodes
    if found is None:
        if ref.gpu and nodes > 1:
            out["notes"] = out["notes"] + [calibration.unknown_cost_note(ref.config.get("framework"), nodes),
                                           calibration.source_note(calibration.ONE_NODE)]
            out["range_calibration"] = calibration.summary(calibration.ONE_NODE)
        return out
    carried = found.carried_ms(nodes)
    point = step + carried
    if point <= 0:
        return out
    low, high = (v + carried for v in out["inputs_step_range"])
    out["inputs_step_range"] = [low, high]
    spread = node.prior_spread(target.shape.devices_per_node) if out.get("node_prior") else (1.0, 1.0)
    if ref.gpu:
        low, high = ranges.widened(point, low, high, nodes, spread, kind=calibration.ANCHORED,
                                   anchor_nodes=found.nodes)
    per_step = out["predicted_throughput"] * step
    out.update(predicted_step_ms=point, predicted_throughput=per_step / point, predicted_step_range=[low, high],
               predicted_throughput_range=[per_step / high, per_step / low], carried_ms=carried,
               anchor=dataclasses.asdict(found),
               range_calibration=calibration.summary(calibration.ANCHORED) if ref.gpu else None,
               notes=out["notes"] + [found.note(nodes)] + ([calibration.source_note(calibration.ANCHORED)]
                                                           if ref.gpu else []))
    if out.get("predicted_efficiency"):
        out["predicted_efficiency"] *= step / point
    return out
