"""Links the records do not measure, stated as such: a network known only by its rate, and the
link inside a GPU node when no comm record of it exists (perfmodel/node.py: from the topology or
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

from fleetbench.perfmodel import alphabeta, nccl, node, published, ranges
from fleetbench.perfmodel import cells as cellmod
from fleetbench.perfmodel.cells import Cell, CommCell, Shape

# transport -> (share of the nominal rate that carries data, how that share is derived)
TRANSPORTS = {
    "tcp": (1448 / 1538, "TCP/IPv4 over Ethernet at MTU 1500: 1448 data bytes (1500 - 20 IP - 20 TCP "
                         "- 12 timestamps) per 1538 on the wire (+ 14 header, 4 FCS, 8 preamble, 12 gap)"),
    "rdma": (4096 / 4122, "InfiniBand RDMA at a 4096-byte MTU: 4096 data bytes per 4122 (+ 8 LRH, "
                          "12 BTH, 4 ICRC, 2 VCRC); the 64b/66b line code is outside the 100 Gb/s data rate"),
}
DEFAULT_TRANSPORT = "tcp"  # a network that does not say runs over sockets (gloo, NCCL's socket transport)
# What one TCP stream of NCCL's socket transport delivers, GB/s: fitted on ddl-benchmarks' 100GbE
# cells (the one fitted table over sockets; 2.0-2.8 GB/s there, docs/guide/explain.md "Clouds"). A
# connection opens NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD streams (network.sockets): 1 x 1 by
# default, 2 x 8 on AWS, 4 x 1 on GCP's gVNIC (NCCL's environment docs); the wire caps them all.
SOCKET_STREAM_GBPS = 2.3
# A synchronous parameter server over TCP (BytePS's ps-lite on ZeroMQ): what a worker node's push
# and pull of S deliver, GB/s, with the servers on hosts of their own (servers_apart). Fitted on
# ddl-benchmarks' PS cells (a fitted table): its ResNet-50 and BERT-Large BSP-PS steps are the same
# over 10GbE and 100GbE, so ps-lite, not the wire, sets it (0.65: 203 of 228 fitted cells within
# 15%, 0.7: 205, 0.75: 203, 0.8: 188; 1.2 GB/s while the servers were taken to share the workers'
# nodes). The IB cells run ps-lite's RDMA van: no cap.
PS_STREAM_GBPS = 0.7
# The latency of one network step of NCCL's socket transport, us: NCCL's own figure (DEFAULT_HOP_US
# "net", 14 us, tuning.cc) is one for every network; over sockets each step also crosses the kernel's
# TCP stack and NCCL's proxy thread on both hosts. Fitted on ddl-benchmarks' all-reduce cells over
# TCP (10GbE and 100GbE, a fitted table; docs/guide/explain.md "Why each kind misses"): its ResNet-50 `wfbp`
# (161 calls a step) lost 0.28 and 0.66 ms a call beyond the 14 us model at 16 and 32 GPUs. Not a
# parameter server's (ps-lite is not NCCL: applied there, 12 more PS cells miss, 197 of 228).
SOCKET_HOP_US = 100.0
# Cloud GPU instances without GPUDirect RDMA on their TCP network (the providers' instance pages):
# 8 GPUs a node share one NIC; NCCL runs its socket transport with the provider's default streams.
INSTANCES = {
    "aws-p3.16xlarge": {"rate_gbit": 25, "transport": "tcp", "nics": 1, "sockets": 16, "gpus": 8,
                        "gpu": "V100-SXM2-16GB", "intra_node": "nvlink"},
    "aws-p3dn.24xlarge": {"rate_gbit": 100, "transport": "tcp", "nics": 1, "sockets": 16, "gpus": 8,
                          "gpu": "V100-SXM2-32GB", "intra_node": "nvlink"},
    "gcp-a2-highgpu-8g": {"rate_gbit": 100, "transport": "tcp", "nics": 1, "sockets": 4, "gpus": 8,
                          "gpu": "A100-SXM4-40GB", "intra_node": "nvswitch"},
    "gcp-n1-8xv100": {"rate_gbit": 32, "transport": "tcp", "nics": 1, "sockets": 4, "gpus": 8,
                      "gpu": "V100-SXM2-16GB", "intra_node": "nvlink"},
    "generic-25gbe": {"rate_gbit": 25, "transport": "tcp", "nics": 1, "sockets": 1, "gpus": 8,
                      "gpu": None, "intra_node": None},
    "generic-100gbe": {"rate_gbit": 100, "transport": "tcp", "nics": 1, "sockets": 1, "gpus": 8,
                       "gpu": None, "intra_node": None},
}


@dataclasses.dataclass
class Found:
    """What link_for found: the link (None: `problem` says why), notes, and node sharing (a factor
    on a micro-step of GPU cells of `sharing_per_node` GPUs a node; perfmodel/node.py)."""
    link: object
    problem: str
    notes: list
    sharing: float = 1.0
    sharing_per_node: int = 0
    node_link: object = None  # the ring inside a GPU node (perfmodel/node.py), when one was found
    one_gpu_alone: bool = False  # a GPU work with no 1-node run of several GPUs (node.prior)
    net_transport: str | None = None  # of a network known by its rate alone (no comm record)


def delivered(transport: str | None, efficiency: float | None, rate_gbit: float | None = None,
              sockets: int = 0, stream_gbps: float = SOCKET_STREAM_GBPS) -> tuple[float, str]:
    """(share of the rate delivered, where from). Over TCP the streams cap it: `sockets` streams a
    connection (default 1) of SOCKET_STREAM_GBPS each, when that is below the wire's share."""
    name = transport or DEFAULT_TRANSPORT
    if efficiency is not None:
        return efficiency, f"efficiency {efficiency:g} as given"
    share, source = TRANSPORTS[name]
    streams = max(1, int(sockets or 1))
    if name == "tcp" and rate_gbit and streams * stream_gbps < rate_gbit / 8 * share:
        capped = streams * stream_gbps / (rate_gbit / 8)
        who = ("a parameter server's connection (ps-lite over TCP)" if stream_gbps == PS_STREAM_GBPS else
               "a connection (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD)")
        return capped, (f"tcp socket streams {capped:.3f} of the rate: {streams} stream(s) {who} x "
                        f"{stream_gbps:g} GB/s each (fitted on ddl-benchmarks' 100GbE cells), under the wire's "
                        f"{share:.3f}")
    return share, f"{name} ceiling {share:.3f}: {source}"


def servers_apart(share: tuple[float, str], ranks: int) -> tuple[float, str]:
    """The delivered share as the all-reduce model must see it when the parameter servers run on
    hosts of their own (ddl-benchmarks' byteps/launch.sh: as many servers as worker nodes, started
    from gpu9 on): a worker node pushes S and pulls S a step whatever the nodes, where NCCL's ring
    sends 2(n-1)/n S over n ranks (perfmodel/nccl.py); so the same time at 2(n-1)/n x the rate."""
    factor = 2 * (ranks - 1) / ranks if ranks > 1 else 1.0
    return share[0] * factor, (f"{share[1]}; servers on hosts of their own: a worker node pushes and pulls "
                               f"S a step at any size, the ring's 2(n-1)/n S at x{factor:.3g} the rate")


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


def _network_rate(network: str | None, cells: list[Cell], comm: list) -> tuple:
    """(rate, transport, NICs, sockets) of a network: as a record gives it, else a cloud instance's."""
    for cell in cells:
        if cell.network == network and cell.rate_gbit:
            return cell.rate_gbit, cell.transport, cell.nics, cell.sockets
    if network in INSTANCES:
        spec = INSTANCES[network]
        return spec["rate_gbit"], spec["transport"], spec["nics"], spec["sockets"]
    return cellmod.known_rate(network, comm), None, 1, 0


def _inter(network, shape: Shape, cells: list[Cell], comm: list,
           change: dict) -> tuple[str | None, list, list, str | None]:
    """(network name, comm cells to add, notes, transport of a link known by its rate alone) for the
    link between nodes."""
    if change.get("rate_gbit"):
        network = f"{change['rate_gbit']:g}gbit-{change.get('transport') or DEFAULT_TRANSPORT}"
        share = delivered(change.get("transport"), change.get("efficiency"), change["rate_gbit"],
                          change.get("sockets") or 0)
        nics = int(change.get("nics") or 1)
        return network, [rate_cell(network, change["rate_gbit"], share, comm, nics)], [
            f"inter-node link by rate: {share[1]}" + (f", {nics} NICs a node" if nics > 1 else "")], (
            change.get("transport") or DEFAULT_TRANSPORT)
    if shape.nodes > 1 and not any(c.network == network and c.shape.nodes > 1 for c in comm):
        rate, transport, nics, sockets = _network_rate(network, cells, comm)
        if not rate and change.get("network_rate"):  # the predicted cell's own record says it
            rate, transport, nics, sockets = (tuple(change["network_rate"]) + (0,))[:4]
        if rate:
            share = delivered(change.get("transport") or transport, change.get("efficiency"), rate, sockets,
                              change.get("stream_gbps") or SOCKET_STREAM_GBPS)
            if change.get("ps_servers_apart"):
                share = servers_apart(share, shape.world_size)
            return network, [rate_cell(network, rate, share, comm, nics)], [
                f"no comm record of network {network or 'local'}: its rate {rate:g} Gbit/s"
                f"{f' x {nics} NICs' if nics > 1 else ''} x {share[1]}; a comm record "
                "of it (collective/comm.py across 2 nodes) would replace this"], (
                change.get("transport") or transport or DEFAULT_TRANSPORT)
    elif shape.nodes > 1 and (change.get("transport") or change.get("efficiency")):
        return network, [], [f"transport/efficiency not used: a comm record of network {network} exists"], None
    return network, [], [], None


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
        found.one_gpu_alone = the_node.one_gpu_alone
    ps = cell.method in published.SYNC_PS
    if ps:  # a PS's ps-lite streams, not NCCL's sockets; servers apart
        change = dict(change, stream_gbps=PS_STREAM_GBPS, ps_servers_apart=True)
    network, more, notes, transport = _inter(network, shape, cells, comm, change)
    found.net_transport = None if ps else transport  # NCCL's transport only: ps-lite has its own latency
    found.notes += notes
    return network, list(comm) + extra + more, found


def _default_latency(link, bound: str, net_transport: str | None = None):
    """GPU links: NCCL's per-step latencies where no comm record measured one, at the bound; a
    network step of NCCL's socket transport (a link over `tcp` known by its rate) SOCKET_HOP_US."""
    scale = ranges.LATENCY_SCALE[bound]

    def fill(part: alphabeta.Link, kind: str) -> alphabeta.Link:
        if part.latency_known or part.ranks < 2:
            return part
        if kind == "net" and net_transport == "tcp":
            hop = SOCKET_HOP_US * scale
            return part.with_hop_us(hop, f"hop latency {hop:g} us (NCCL's socket transport, fitted on "
                                         f"ddl-benchmarks' TCP cells, x{scale:g}: not measured)")
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
    found.link = _default_latency(link, bound, found.net_transport) if link is not None and cell.gpu else link
    return found
