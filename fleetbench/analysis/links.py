"""Links the records do not measure, stated as such: a network known only by its rate, and the
link inside a GPU node when no comm record of it exists. A comm record (collective/comm.py run on
the cluster) always wins: what is derived here only fills a gap cells.link_for would otherwise
report, and every prediction that uses it says so in its notes.

Rate: a link of R Gbit/s delivers at most R/8 GB/s times the share of the wire its transport
leaves to data (TRANSPORTS, each with its derivation). That is a ceiling: a transport that cannot
drive its link (one TCP stream on 100 GbE) delivers less, and only a comm record can tell how much.
The fraction is overridable (`--predict rate_gbit=100,transport=tcp,efficiency=0.4`).

Intra-node (GPU work): the 1-node run of a post-backward method exposes its whole all-reduce,
exposed = step(1 node) - step(1 device), so the ring's bus bandwidth there is
2(d-1)/d x S / exposed for d devices and S gradient bytes. Latency, packing and the reduction
kernels are inside that figure; it is the same work's, so it carries the same host cost.
"""
from __future__ import annotations

from fleetbench.analysis import alphabeta
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


def delivered(transport: str | None, efficiency: float | None) -> tuple[float, str]:
    """(share of the rate delivered, where from)."""
    name = transport or DEFAULT_TRANSPORT
    if efficiency is not None:
        return efficiency, f"efficiency {efficiency:g} as given"
    share, source = TRANSPORTS[name]
    return share, f"{name} ceiling {share:.3f}: {source}"


def rate_cell(network: str | None, rate_gbit: float, share: tuple[float, str], comm: list) -> CommCell:
    """A two-node ring of one device each on a link of `rate_gbit`, delivering share[0] of it; the
    per-message latency of the nearest measured inter-node ring (0 when none)."""
    measured = [c for c in comm if c.shape.nodes > 1 and c.shape.devices_per_node == 1]
    nearest = min(measured, key=lambda c: c.shape.world_size, default=None)
    hop = nearest.link.hop_alpha_us if nearest else 0.0
    latency = (f"latency from comm record {nearest.network or 'local'} {nearest.shape}" if nearest
               else "latency unknown, taken as 0")
    source = f"rate {rate_gbit:g} Gbit/s x {share[0]:.3g} delivered, {latency}"
    return CommCell(network, Shape(2, 1), alphabeta.Link(2 * hop, rate_gbit / 8.0 * share[0], 2, source),
                    rate_gbit)


def intra_from_node_run(cell: Cell, cells: list[Cell]) -> CommCell | None:
    """The intra-node ring of `cell`'s GPU work, from its 1-node post-backward run (module doc)."""
    single = cellmod.find_single(cell, cells)
    runs = [c for c in cells if c.gpu and c.shape.nodes == 1 and c.shape.devices_per_node > 1
            and c.method in cellmod.POST_BACKWARD and c.comm_bytes and cellmod.same_work(c, cell)]
    if not cell.gpu or single is None or not runs:
        return None
    node = min(runs, key=lambda c: (c.network != cell.network, -c.shape.devices_per_node))
    exposed = node.step_ms - single.step_ms
    if exposed <= 0:
        return None
    ranks = node.shape.devices_per_node
    bandwidth = alphabeta.allreduce_factor(ranks) * node.comm_bytes / (exposed * 1e6)
    source = (f"derived from the 1-node run {node.label}, {exposed:.1f} ms exposed for "
              f"{node.comm_bytes / 1e6:.1f} MB")
    return CommCell(node.network, node.shape, alphabeta.Link(0.0, bandwidth, ranks, source), None)


def _share_note(change: dict, transport: str | None) -> str:
    return delivered(change.get("transport") or transport, change.get("efficiency"))[1]


def _network_rate(network: str | None, cells: list[Cell], comm: list) -> tuple[float | None, str | None]:
    for cell in cells:
        if cell.network == network and cell.rate_gbit:
            return cell.rate_gbit, cell.transport
    return cellmod.known_rate(network, comm), None


def completed(cell: Cell, network: str | None, shape: Shape, cells: list[Cell], comm: list,
              change: dict | None = None) -> tuple[str | None, list, list[str]]:
    """(network name to look up, comm cells with what is derived added, notes). `change` may hold
    rate_gbit (replaces the network), transport and efficiency (--predict)."""
    change = change or {}
    extra, notes = [], []
    if shape.devices_per_node > 1 and cell.gpu and not any(c.shape.nodes == 1 for c in comm):
        derived = intra_from_node_run(cell, cells)
        if derived is not None:
            extra.append(derived)
            notes.append("no intra-node comm record: intra-node link derived from the 1-node run of a "
                         "post-backward method (its exposed communication)")
    if change.get("rate_gbit"):
        network = f"{change['rate_gbit']:g}gbit-{change.get('transport') or DEFAULT_TRANSPORT}"
        extra.append(rate_cell(network, change["rate_gbit"],
                               delivered(change.get("transport"), change.get("efficiency")), comm))
        notes.append(f"inter-node link by rate: {_share_note(change, None)}")
    elif shape.nodes > 1 and not any(c.network == network and c.shape.nodes > 1 for c in comm):
        rate, transport = _network_rate(network, cells, comm)
        if rate:
            share = delivered(change.get("transport") or transport, change.get("efficiency"))
            extra.append(rate_cell(network, rate, share, comm))
            notes.append(f"no comm record of network {network or 'local'}: its rate {rate:g} Gbit/s x "
                         f"{_share_note(change, transport)}; a comm record of it (collective/comm.py across "
                         "2 nodes) would replace this")
    elif shape.nodes > 1 and (change.get("transport") or change.get("efficiency")):
        notes.append(f"transport/efficiency not used: a comm record of network {network} exists")
    return network, list(comm) + extra, notes


def link_for(cell: Cell, network: str | None, shape: Shape, cells: list[Cell], comm: list,
             change: dict | None = None):
    """(link, problem, notes) of `cell`'s work at `shape` on `network`: cells.link_for over the
    comm records and what `completed` derives; the backend is NCCL for GPU work, gloo for CPU."""
    network, comm, notes = completed(cell, network, shape, cells, comm, change)
    link, problem = cellmod.link_for(network, shape, comm, None, "nccl" if cell.gpu else "gloo")
    return link, problem, notes
