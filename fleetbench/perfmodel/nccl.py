"""How NCCL all-reduces across nodes of several GPUs, as a cost model: its ring and its tree, and
the one it would pick at each message size; and the link inside a GPU node read from its topology.

Learned from NCCL's own cost model (src/graph/tuning.cc: ncclTopoTuneModel, ncclTopoGetAlgoTime),
read, not copied. NCCL prices each (algorithm, protocol) as a latency plus bytes over a bandwidth
and runs the cheapest. For an all-reduce of S bytes over n GPUs on N nodes of d GPUs:

    ring   2(n-1) steps, of which 2(N-1) cross the network: latency (2(n-1) - 2(N-1))·a_intra
           + 2(N-1)·a_net; every GPU sends 2(n-1)/n·S at the slowest hop's bus bandwidth B
    tree   a chain inside each node and a (double binary) tree across nodes: latency
           2·((d-1)·a_intra + log2(N)·a_net); S/2 up and S/2 down each tree, so 2·S at the bus
           bandwidth, of which NCCL's model keeps 92% (its tree is less efficient than its ring)

B = min(the node's bus bandwidth, NICs a node x delivered rate a NIC): each of NCCL's rings (one
a channel) crosses every node boundary once, and the channels are spread over a node's NICs
(rails), so the node's NICs together carry 2(n-1)/n·S. The ring's latency grows with N, the
tree's with log2(N): at hundreds of nodes the tree wins for all but the largest buckets, which is
what NCCL does. Not modelled: the LL/LL128 protocols (they win below ~64 kB, where a step's
gradients are rarely sent), NCCL's size-dependent tree correction (0.5-0.9 between 64 kB and
16 MB) and its ring latency "plateau" (x1.4-1.9 on multi-node rings): both inside the latency
range a prediction carries (DEFAULT_HOP_US, x0 to x2).

Default per-step latencies (no comm record of the link): NCCL's Simple-protocol figures, about
14 us a network step and 3-6 us an NVLink/PCIe step (tuning.cc's hwLatencies); a comm record's
fit always replaces them.
"""
from __future__ import annotations

import dataclasses
import math

from fleetbench.perfmodel import alphabeta

TREE_SHARE = 0.92  # NCCL's model: a tree all-reduce reaches 92% of the bus bandwidth a ring does
DEFAULT_HOP_US = {"net": 14.0, "nvlink": 3.4, "pcie": 5.7}  # NCCL tuning.cc, Simple protocol
ALGORITHMS = ("auto", "ring", "tree")


@dataclasses.dataclass(frozen=True)
class NcclLink:
    """All-reduce among `nodes` x `per_node` GPUs: `intra` the node's ring (bus bandwidth, hop
    latency), `inter` the network per node (bandwidth of all its NICs together, hop latency)."""
    intra: alphabeta.Link
    inter: alphabeta.Link
    nodes: int
    per_node: int
    algorithm: str = "auto"  # auto: NCCL's pick per size; ring or tree: NCCL_ALGO set

    @property
    def ranks(self) -> int:
        return self.nodes * self.per_node

    @property
    def bandwidth_GBps(self) -> float:
        return min(self.intra.bandwidth_GBps, self.inter.bandwidth_GBps)

    def ring_us(self, nbytes: float) -> float:
        n, cross = self.ranks, 2 * (self.nodes - 1)
        latency = (2 * (n - 1) - cross) * self.intra.hop_alpha_us + cross * self.inter.hop_alpha_us
        return latency + alphabeta.allreduce_factor(n) * nbytes / (self.bandwidth_GBps * 1e3)

    def tree_us(self, nbytes: float) -> float:
        depth = math.ceil(math.log2(self.nodes)) if self.nodes > 1 else 0
        latency = 2 * ((self.per_node - 1) * self.intra.hop_alpha_us + depth * self.inter.hop_alpha_us)
        return latency + 2 * nbytes / (TREE_SHARE * self.bandwidth_GBps * 1e3)

    def pick(self, nbytes: float) -> tuple[str, float]:
        """(algorithm, microseconds) of one all-reduce of `nbytes`: NCCL's cheaper one."""
        ring, tree = self.ring_us(nbytes), self.tree_us(nbytes)
        if self.algorithm == "ring" or (self.algorithm == "auto" and ring <= tree):
            return "ring", ring
        return "tree", tree

    def call_ms(self, nbytes: float) -> float:
        return self.pick(nbytes)[1] / 1e3 if self.ranks > 1 and nbytes > 0 else 0.0

    def allreduce_ms(self, nbytes: float, calls: float) -> float:
        if self.ranks <= 1 or nbytes <= 0:
            return 0.0
        if not calls:  # the bytes alone, at the picked algorithm's bandwidth (gradbytes.latency_share)
            return alphabeta.allreduce_factor(self.ranks) * nbytes / (self.bandwidth_GBps * 1e6)
        return calls * self.call_ms(nbytes / calls)

    def describe(self, nbytes: float | None = None) -> str:
        picked = ""
        if nbytes:
            algo, _ = self.pick(nbytes)
            picked = f"; NCCL picks {algo} at {nbytes / 1e6:.3g} MB a call"
        return (f"NCCL over {self.nodes}x{self.per_node} GPUs ({self.algorithm}{picked}): intra-node "
                f"{self.intra.describe()}; network {self.inter.describe()}")

    @property
    def source(self) -> str:
        return self.describe()


# ---- the link inside a node, from its topology ---------------------------------------------------

# Per GPU, per direction, GB/s: NVLink generations (links a GPU x 25 GB/s, 20 for NVLink 1) and
# PCIe x16 generations (the data rate after line coding), from NVIDIA's GPU and PCI-SIG figures.
NVLINK_GBPS = {"P100": 80.0, "V100": 150.0, "A100": 300.0, "H100": 450.0, "H200": 450.0, "B200": 900.0}
PCIE_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}
PCIE_GEN = {"P100": 3, "V100": 3, "T4": 3, "2080": 3, "K80": 3, "P40": 3, "A100": 4, "A30": 4, "A10": 4,
            "3090": 4, "A40": 4, "L4": 4, "L40": 4, "H100": 5, "H200": 5, "B200": 5}
PER_LINK_GBPS = {"P100": 20.0}  # every later generation: 25 GB/s a link and direction
INTRA_LINKS = ("nvlink", "nvswitch", "pcie")


def _generation(gpu: str, table: dict):
    return next((v for k, v in table.items() if k.lower() in (gpu or "").lower()), None)


def intra_GBps(link: str, gpu: str | None, nvlinks: int | None = None) -> tuple[float | None, str]:
    """(per-GPU bandwidth a direction, how it was read) of an intra-node link kind for a GPU model."""
    if link in ("nvlink", "nvswitch"):
        if nvlinks:
            per = _generation(gpu, PER_LINK_GBPS) or 25.0
            return nvlinks * per, f"{nvlinks} NVLinks x {per:g} GB/s"
        value = _generation(gpu, NVLINK_GBPS)
        return value, (f"{gpu} NVLink, {value:g} GB/s a GPU and direction" if value else
                       f"NVLink of an unknown GPU model ({gpu or 'not given'})")
    gen = _generation(gpu, PCIE_GEN) or 3
    return PCIE_GBPS[gen], f"PCIe {gen}.0 x16, {PCIE_GBPS[gen]:g} GB/s a direction" + (
        "" if _generation(gpu, PCIE_GEN) else " (generation not known for this GPU: 3.0 assumed)")


def from_matrix(topology: dict, gpu: str | None) -> tuple[str, int | None] | None:
    """(link kind, NVLinks a GPU) read from an nvidia-smi topology matrix (machine/topology.parse):
    NV# between every pair alike -> an NVSwitch (each GPU's # links go to the switch); else, when
    every GPU has NVLinks to two others or more (a ring can run on NVLink alone, as NCCL's do on a
    hybrid cube mesh), the fewest NVLinks a GPU has; else pcie."""
    links = (topology or {}).get("links") or {}
    gpus = [g for g in (topology or {}).get("gpus") or links if g in links]
    if len(gpus) < 2:
        return None

    def nv(a, b) -> int:
        code = links[a].get(b, "")
        return int(code[2:]) if code.startswith("NV") and code[2:].isdigit() else 0

    pairs = [nv(a, b) for a in gpus for b in gpus if a != b]
    if all(pairs) and len(set(pairs)) == 1 and len(gpus) > 2:
        return "nvswitch", pairs[0]
    if all(sum(1 for b in gpus if b != a and nv(a, b)) >= min(2, len(gpus) - 1) for a in gpus):
        return "nvlink", min(sum(nv(a, b) for b in gpus if b != a) for a in gpus)
    return "pcie", None
