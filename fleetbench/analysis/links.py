"""Links the records do not measure, stated as such: a network known only by its rate, and the
link inside a GPU node when no comm record of it exists (analysis/node.py: from the topology or
the 1-node run). A comm record (collective/comm.py run on the cluster) always wins: what is
derived here only fills a gap cells.link_for would otherwise report, and every prediction that
uses it says so in its notes.

Rate: a link of R Gbit/s delivers at most R/8 GB/s times the share of the wire its transport
leaves to data (TRANSPORTS, each with its derivation), times the NICs a node drives at once
(`network.nics`: rails; NCCL spreads its channels over them). That is a ceiling: a transport that
cannot drive its link (one TCP stream on 100 GbE) delivers less, and only a comm record can tell
how much. The fraction is overridable (`--predict rate_gbit=100,transport=tcp,efficiency=0.4`).

Latency nobody measured: 0 for gloo (as before), NCCL's per-step defaults for GPU links
(nccl.DEFAULT_HOP_US), scaled by the prediction's bound (ranges.LATENCY_SCALE: 0 to 2x).
"""
from __future__ import annotations

import dataclasses

from fleetbench.analysis import alphabeta, nccl, node, ranges
from fleetbench.analysis import cells as cellmod
from fleetbench.analysis.cells import Cell, CommCell, Shape

# transport -> (share of the nominal rate that carries data, how that share is derived)
TRANSPORTS = {
    "tcp": (1448 / 1538, "TCP/IPv4 over Ethernet at MTU 1500: 1448 data bytes (1500 - 20 IP - 20 TCP "
                         "- 12 timestamps) per 1538 on the wire (+ 14 header, 4 FCS, 8 preamble, 12 gap)"),
    "rdma": (4096 / 4122, "InfiniBand RDMA at a 4096-byte MTU: 4096 data bytes per 4122 (+ 8 LRH, "
                          "12 BTH, 4 ICRC, 2 VCRC); the 64b/66b line code is outside the 100 Gb/s data rate"),
}
DEFAULT_TRANSPORT = "tcp"  # a network that does not say runs over sockets (gloo, NCCL's socket transport)


@dataclasses.dataclass
class Found:
    """What link_for found: the link (None: `problem` says why), notes, and node sharing (a factor
    on a micro-step of GPU cells of `sharing_per_node` GPUs a node; analysis/node.py)."""
    link: object
    problem: str
    notes: list
    sharing: float = 1.0
    sharing_per_node: int = 0
    node_link: object = None  # the ring inside a GPU node (analysis/node.py), when one was found


def delivered(transport: str | None, efficiency: float | None) -> tuple[float, str]:
    """(share of the rate delivered, where from)."""
    name = transport or DEFAULT_TRANSPORT
    if efficiency is not None:
        return efficiency, f"efficiency {efficiency:g} as given"
    share, source = TRANSPORTS[name]
    return share, f"{name} ceiling {share:.3f}: {source}"


def rate_cell(network: str | None, rate_gbit: float, share: tuple[float, str], comm: list,
              nics: int = 1) -> CommCell:
    """A two-node ring of one device each on `nics` links of `rate_gbit`, delivering share[0] of
    it; the per-message latency of the nearest measured inter-node ring (unknown when none)."""
    measured = [c for c in comm if c.shape.nodes > 1 and c.shape.devices_per_node == 1 and c.link.latency_known]
    nearest = min(measured, key=lambda c: c.shape.world_size, default=None)
    latency = (f"latency from comm record {nearest.network or 'local'} {nearest.shape}" if nearest
               else "latency unknown")
    rails = f" x {nics} NICs a node" if nics > 1 else ""
    source = f"rate {rate_gbit:g} Gbit/s{rails} x {share[0]:.3g} delivered, {latency}"
    link = alphabeta.Link(2 * nearest.link.hop_alpha_us if nearest else 0.0, rate_gbit / 8.0 * share[0] * nics,
                          2, source, latency_known=nearest is not None)
    return CommCell(network, Shape(2, 1), link, rate_gbit)


def _share_note(change: dict, transport: str | None) -> str:
    return delivered(change.get("transport") or transport, change.get("efficiency"))[1]


def _network_rate(network: str | None, cells: list[Cell], comm: list) -> tuple[float | None, str | None, int]:
    for cell in cells:
        if cell.network == network and cell.rate_gbit:
            return cell.rate_gbit, cell.transport, cell.nics
    return cellmod.known_rate(network, comm), None, 1


def _inter(network, shape: Shape, cells: list[Cell], comm: list, change: dict) -> tuple[str | None, list, list]:
    """(network name, comm cells to add, notes) for the link between nodes."""
    if change.get("rate_gbit"):
        network = f"{change['rate_gbit']:g}gbit-{change.get('transport') or DEFAULT_TRANSPORT}"
        share = delivered(change.get("transport"), change.get("efficiency"))
        nics = int(change.get("nics") or 1)
        return network, [rate_cell(network, change["rate_gbit"], share, comm, nics)], [
            f"inter-node link by rate: {_share_note(change, None)}" + (f", {nics} NICs a node" if nics > 1 else "")]
    if shape.nodes > 1 and not any(c.network == network and c.shape.nodes > 1 for c in comm):
        rate, transport, nics = _network_rate(network, cells, comm)
        if not rate and change.get("network_rate"):  # the predicted cell's own record says it
            rate, transport, nics = change["network_rate"]
        if rate:
            share = delivered(change.get("transport") or transport, change.get("efficiency"))
            return network, [rate_cell(network, rate, share, comm, nics)], [
                f"no comm record of network {network or 'local'}: its rate {rate:g} Gbit/s"
                f"{f' x {nics} NICs' if nics > 1 else ''} x {_share_note(change, transport)}; a comm record "
                "of it (collective/comm.py across 2 nodes) would replace this"]
    elif shape.nodes > 1 and (change.get("transport") or change.get("efficiency")):
        return network, [], [f"transport/efficiency not used: a comm record of network {network} exists"]
    return network, [], []


def completed(cell: Cell, network: str | None, shape: Shape, cells: list[Cell], comm: list,
              change: dict | None = None, bound: str = ranges.POINT) -> tuple[str | None, list, Found]:
    """(network name to look up, comm cells with what is derived added, a Found with notes and node
    sharing). `change` may hold rate_gbit (replaces the network), transport, efficiency and nics,
    and network_rate: (rate, transport, nics) of the network as the predicted cell's record gives it."""
    change = change or {}
    extra, found = [], Found(None, "", [])
    if shape.devices_per_node > 1 and cell.gpu:
        node_comm = next((c.link for c in comm if c.shape.nodes == 1 and c.shape.devices_per_node > 1), None)
        the_node = node.of_work(cell, cells, node_comm, bound)
        found.node_link = the_node.link or node_comm
        if the_node.link is not None:
            extra.append(CommCell(None, Shape(1, the_node.per_node), the_node.link, None))
        found.notes += the_node.notes
        found.sharing, found.sharing_per_node = the_node.sharing, the_node.per_node
    network, more, notes = _inter(network, shape, cells, comm, change)
    found.notes += notes
    return network, list(comm) + extra + more, found


def _default_latency(link, bound: str):
    """GPU links: NCCL's per-step latencies where no comm record measured one, at the bound."""
    scale = ranges.LATENCY_SCALE[bound]

    def fill(part: alphabeta.Link, kind: str) -> alphabeta.Link:
        if part.latency_known or part.ranks < 2:
            return part
        hop = nccl.DEFAULT_HOP_US[kind] * scale
        return part.with_hop_us(hop, f"hop latency {hop:g} us (NCCL's default x{scale:g}: not measured)")

    if isinstance(link, nccl.NcclLink):
        return dataclasses.replace(link, intra=fill(link.intra, "nvlink"), inter=fill(link.inter, "net"))
    return fill(link, "nvlink") if isinstance(link, alphabeta.Link) else link


def link_for(cell: Cell, network: str | None, shape: Shape, cells: list[Cell], comm: list,
             change: dict | None = None, bound: str = ranges.POINT) -> Found:
    """The link of `cell`'s work at `shape` on `network`: cells.link_for over the comm records and
    what `completed` derives; the backend is NCCL for GPU work, gloo for CPU."""
    network, comm, found = completed(cell, network, shape, cells, comm, change, bound)
    link, found.problem = cellmod.link_for(network, shape, comm, None, "nccl" if cell.gpu else "gloo")
    found.link = _default_latency(link, bound) if link is not None and cell.gpu else link
    return found
