"""The performance model of hybrid-parallel GPT training: memory a GPU and the time of a step, from
the model's shape, the split (TP x PP x DP, sharding, recomputation) and the cluster. Pure code.

Step (one global batch), for m = global_batch / (dp x micro_batch) micro-batches a pipeline:

    micro-batch   compute: the training FLOPs of its tokens (measure/flops.py, with the recomputed
                  forward) / (tp x pp) at the GPU's peak x GEMM efficiency (below); TP: 4 collectives
                  a layer (2 forward, 2 backward; 6 with full recomputation) of the micro-batch's
                  activations (b s h x 2 bytes), ring all-reduce over NVLink, or reduce-scatter +
                  all-gather with sequence parallelism (the same bytes); not overlapped (Megatron-LM
                  and Paddle's meta_parallel layers wait for them); PP: an activation forward and a
                  gradient back a stage, b s h x 2 / tp bytes (scatter-gather) over the network
    pipeline      (m + (pp - 1) / v) micro-batches: 1F1B's bubble is (pp - 1) micro-batch times,
                  the interleaved schedule's (v model chunks a GPU) (pp - 1) / v (Narayanan, sec. 2.2)
    DP/sharding   the gradients a GPU holds (bf16/fp16: 2 bytes a parameter) all-reduced over the dp
                  group with perfmodel/nccl.py (ring or tree, NVLink inside a node, the NICs across);
                  sharding stage 1 reduce-scatters + all-gathers the same bytes once a step; stages 2-3
                  every micro-batch (a rank keeps only its gradient shard, so accumulation cannot wait),
                  stage 3 gathering the weights once more for backward (x1.5); exposed (after
                  backward), as Megatron-LM's 2021 code and Paddle's sharding without overlap run it

GEMM efficiency: the share of peak a GPU's matrix multiplications reach grows with their width; the
model uses eff = EFF_MAX x w / (w + EFF_HALF_WIDTH), w = hidden / tp, a saturating curve; beside
the GEMMs, a layer's memory-bound work (norms, dropout, softmax, GELU, residuals) costs MEM_TRAFFIC
x the activation bytes Korthikanti counts for it, a pass, at the GPU's memory bandwidth
(measure/devices.hbm_GBps): it is what makes small hidden sizes and wide TP without sequence
parallelism (which replicates those ops) slower than their FLOPs say. The constants are fitted on
one published table (perfmodel/hybrid_tables.py says which) and checked on the others.

Memory a GPU (Korthikanti et al. 2022, sec. 4, bytes; s seq, b micro-batch, h hidden, a heads, t tp):
    weights 2, gradients 2, Adam state 12 bytes a parameter (fp32 master, m, v), divided by the
    sharding degree (dp) from stage 3, 2 and 1 on; activations a layer and micro-batch:
        no recomputation     s b h (10 + 24/t + 5 a s / (h t)),  with SP: s b h / t (34 + 5 a s / h)
        selective            s b h (10 + 24/t),                  with SP: 34 s b h / t
        full                 2 s b h,                            with SP: 2 s b h / t
    (flash attention keeps no s x s scores: the 5as/h term goes, as with selective); the first
    stage holds min(m, pp) micro-batches of its l/pp layers (1F1B), x (1 + (pp-1)/(pp v)) interleaved;
    plus the fp32 logits of one micro-batch (4 s b V / t).
"""
from __future__ import annotations

import dataclasses
import math

from fleetbench.perfmodel import alphabeta, nccl
from fleetbench.measure import devices, flops

GIB = 2 ** 30
EFF_MAX = 0.66         # fitted: perfmodel/hybrid_tables.py fit() on Megatron-LM's Table 1
EFF_HALF_WIDTH = 0.0    # fitted with it: no width dependence left once memory-bound work is priced
NVLINK_SHARE = 0.77    # NCCL all-reduce bus bandwidth / NVLink per direction (230 of 300 GB/s, DGX A100)
NET_SHARE = 0.90       # of the NICs' line rate an all-reduce or a send delivers
ACT_BYTES = 2          # bf16/fp16 activations and gradients on the wire
BUCKET_BYTES = 40e6    # gradients are all-reduced in buckets (Megatron, Paddle: tens of MB)
MEM_TRAFFIC = 6.0      # fitted with them: bytes moved a byte of stored activation and pass


@dataclasses.dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    ffn: int | None = None  # None: 4 x hidden
    gated: bool = False     # SwiGLU (LLaMA)
    flash: bool = False     # flash attention: no s x s activations kept

    def parameters(self) -> float:
        return flops.gpt_parameters(self.layers, self.hidden, self.vocab, self.ffn, self.gated)

    def flops_per_token(self, recompute: str = "none") -> float:
        return flops.gpt_train_flops_per_token(self.layers, self.hidden, self.seq, self.vocab, self.ffn,
                                               self.gated, recompute)


@dataclasses.dataclass(frozen=True)
class Split:
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    recompute: str = "none"
    sharding_stage: int = 0
    sequence_parallel: bool = False
    interleave: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def micro_batches(self) -> int:
        return self.global_batch // (self.dp * self.micro_batch)

    def label(self) -> str:
        extra = [f"sharding{self.sharding_stage}"] if self.sharding_stage else []
        extra += ["sp"] if self.sequence_parallel else []
        extra += [f"v{self.interleave}"] if self.interleave > 1 else []
        return (f"tp{self.tp} pp{self.pp} dp{self.dp} mb{self.micro_batch} {self.recompute}"
                + "".join(" " + e for e in extra))


@dataclasses.dataclass(frozen=True)
class Cluster:
    gpu: str                 # a name measure/devices.py knows
    gpus_per_node: int
    nics: int = 8            # NICs a node (rails)
    nic_gbit: float = 200.0  # line rate a NIC
    precision: str = "bf16"
    memory_gib: float | None = None  # None: the device's default memory

    @property
    def device(self) -> devices.Device:
        found = devices.lookup(self.gpu)
        if found is None:
            raise ValueError(f"unknown GPU {self.gpu!r} (known: {devices.known()})")
        return found

    @property
    def peak_flops(self) -> float:
        return self.device.peak_tflops(self.precision) * 1e12

    @property
    def memory(self) -> float:
        return self.memory_gib or devices.memory_gib(self.gpu)


def check(shape: Shape, split: Split, cluster: Cluster) -> str | None:
    """Why this split cannot run this model (one line), or None."""
    problems = [
        (shape.hidden % shape.heads, f"hidden {shape.hidden} is not a multiple of heads {shape.heads}"),
        (shape.heads % split.tp, f"heads {shape.heads} do not divide among tp {split.tp}"),
        (shape.layers % (split.pp * split.interleave),
         f"layers {shape.layers} do not divide among pp {split.pp} x interleave {split.interleave}"),
        (split.global_batch % (split.dp * split.micro_batch),
         f"global batch {split.global_batch} is not a multiple of dp {split.dp} x micro-batch {split.micro_batch}"),
        (split.tp > cluster.gpus_per_node, f"tp {split.tp} spans more than a node's {cluster.gpus_per_node} GPUs"),
        (split.sequence_parallel and split.tp == 1, "sequence parallelism needs tp > 1"),
        (split.interleave > 1 and split.pp == 1, "an interleaved schedule needs pp > 1"),
        (split.interleave > 1 and split.micro_batches % split.pp,
         f"the interleaved schedule needs micro-batches ({split.micro_batches}) a multiple of pp {split.pp}"),
    ]
    return next((why for bad, why in problems if bad), None)


def gemm_efficiency(shape: Shape, split: Split) -> float:
    width = shape.hidden / split.tp
    return EFF_MAX * width / (width + EFF_HALF_WIDTH)


def _tp_link(cluster: Cluster, tp: int) -> alphabeta.Link:
    bus = cluster.device.nvlink_GBps * NVLINK_SHARE or nccl.PCIE_GBPS[4] * NVLINK_SHARE
    return alphabeta.Link(0.0, bus, tp, "NVLink").with_hop_us(nccl.DEFAULT_HOP_US["nvlink"], "NCCL default")


def _net_GBps(cluster: Cluster) -> float:
    return cluster.nics * cluster.nic_gbit / 8.0 * NET_SHARE


def layer_activation_bytes(shape: Shape, split: Split, recompute: str) -> float:
    """Korthikanti's activation bytes of one layer and micro-batch a GPU keeps (module doc)."""
    s, b, h, t, a = shape.seq, split.micro_batch, shape.hidden, split.tp, shape.heads
    scores = 0.0 if shape.flash or recompute != "none" else 5 * a * s / h
    if recompute == "full":
        return 2 * s * b * h / (t if split.sequence_parallel else 1)
    if split.sequence_parallel:
        return s * b * h / t * (34 + scores)
    return s * b * h * (10 + 24 / t + scores / t)


def memory_bound_s(shape: Shape, split: Split, cluster: Cluster) -> float:
    """Seconds of a micro-batch's memory-bound work a stage: MEM_TRAFFIC x the activation bytes a
    layer writes (Korthikanti's count, which holds what its norms, dropouts, softmax and GELU touch,
    replicated across TP ranks unless sequence-parallel), per pass (forward, twice backward, and the
    recomputed forward), at the GPU's memory bandwidth."""
    stored = layer_activation_bytes(shape, split, "none")
    passes = 3.0
    if split.recompute == "full":
        passes += 1.0
    elif split.recompute == "selective" and not shape.flash:
        passes += 1.0 - layer_activation_bytes(shape, split, "selective") / stored
    hbm = (devices.hbm_GBps(cluster.gpu) or 1000.0) * 1e9
    return MEM_TRAFFIC * stored * passes / 3.0 * shape.layers / split.pp / hbm


def micro_batch_parts(shape: Shape, split: Split, cluster: Cluster) -> dict:
    """Seconds of one micro-batch a stage: compute, TP collectives, PP sends."""
    tokens = split.micro_batch * shape.seq
    work = shape.flops_per_token(split.recompute) * tokens / (split.tp * split.pp)
    compute = work / (cluster.peak_flops * gemm_efficiency(shape, split)) + memory_bound_s(shape, split, cluster)
    tp_s = 0.0
    if split.tp > 1:
        calls = 6 if split.recompute == "full" else 4
        nbytes = tokens * shape.hidden * ACT_BYTES
        tp_s = shape.layers / split.pp * calls * _tp_link(cluster, split.tp).allreduce_ms(nbytes, 1) / 1e3
    pp_s = 0.0
    if split.pp > 1:
        nbytes = tokens * shape.hidden * ACT_BYTES / split.tp
        hop_s = nbytes / (cluster.nic_gbit / 8.0 * NET_SHARE * 1e9) + nccl.DEFAULT_HOP_US["net"] / 1e6
        pp_s = 2 * split.interleave * hop_s
    return {"compute": compute, "tp_comm": tp_s, "pp_p2p": pp_s}


def dp_comm_s(shape: Shape, split: Split, cluster: Cluster) -> float:
    """Seconds of the gradient all-reduce (or sharding's reduce-scatter + all-gather) a step."""
    if split.dp == 1:
        return 0.0
    nbytes = shape.parameters() / (split.tp * split.pp) * ACT_BYTES
    per_node = max(1, min(split.dp, cluster.gpus_per_node // split.tp))
    nodes = math.ceil(split.dp / per_node)
    intra = alphabeta.Link(0.0, _tp_link(cluster, 2).bandwidth_GBps, per_node, "NVLink").with_hop_us(
        nccl.DEFAULT_HOP_US["nvlink"], "NCCL default")
    # the dp group's GPUs of a node share the node's NICs with the other groups' (tp of them)
    inter = alphabeta.Link(0.0, _net_GBps(cluster) / min(split.tp, cluster.gpus_per_node) * per_node,
                           max(nodes, 2), "NICs").with_hop_us(nccl.DEFAULT_HOP_US["net"], "NCCL default")
    link = nccl.NcclLink(intra, inter, nodes, per_node)
    seconds = link.allreduce_ms(nbytes, max(1, math.ceil(nbytes / BUCKET_BYTES))) / 1e3
    if split.sharding_stage >= 2:
        # a rank keeps only its shard of the gradients, so every micro-batch's backward reduces them
        # (ZeRO-2/3: accumulation cannot wait for the step); stage 3 gathers the weights again too
        seconds *= split.micro_batches * (1.5 if split.sharding_stage == 3 else 1.0)
    return seconds


def memory_bytes(shape: Shape, split: Split) -> dict:
    """Bytes a GPU holds (module doc), the first pipeline stage's (the fullest)."""
    per_layer = shape.parameters() - shape.vocab * shape.hidden
    params = (per_layer / shape.layers * shape.layers / split.pp + shape.vocab * shape.hidden) / split.tp
    shard = split.dp if split.sharding_stage else 1
    weights = 2 * params / (shard if split.sharding_stage >= 3 else 1)
    grads = 2 * params / (shard if split.sharding_stage >= 2 else 1)
    optimizer = 12 * params / shard
    s, b, t = shape.seq, split.micro_batch, split.tp
    layer = layer_activation_bytes(shape, split, split.recompute)
    in_flight = min(split.micro_batches, split.pp)
    if split.interleave > 1:
        in_flight *= 1 + (split.pp - 1) / (split.pp * split.interleave)
    activations = layer * shape.layers / split.pp * in_flight + 4 * s * b * shape.vocab / t
    return {"weights": weights, "gradients": grads, "optimizer": optimizer, "activations": activations}


@dataclasses.dataclass(frozen=True)
class Prediction:
    shape: Shape
    split: Split
    cluster: Cluster
    parts: dict        # seconds a step: compute, tp_comm, bubble, pp_p2p, dp_comm, exposed
    memory: dict       # bytes a GPU: weights, gradients, optimizer, activations

    @property
    def step_s(self) -> float:
        return sum(v for k, v in self.parts.items() if k != "exposed")

    @property
    def tokens_per_s(self) -> float:
        return self.split.global_batch * self.shape.seq / self.step_s

    def tflops_per_gpu(self, recompute: str = "none") -> float:
        """Achieved TFLOP/s a GPU counting `recompute`'s FLOPs ("none": model FLOPs, MFU's)."""
        return self.shape.flops_per_token(recompute) * self.tokens_per_s / self.split.gpus / 1e12

    @property
    def mfu(self) -> float:
        return self.tflops_per_gpu() * 1e12 / self.cluster.peak_flops

    @property
    def memory_gib(self) -> float:
        return sum(self.memory.values()) / GIB

    @property
    def fits(self) -> bool:
        return self.memory_gib <= self.cluster.memory

    def as_json(self) -> dict:
        return {"split": dataclasses.asdict(self.split), "step_s": self.step_s,
                "tokens_per_s": self.tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s / self.split.gpus,
                "tflops_per_gpu": self.tflops_per_gpu(), "hw_tflops_per_gpu": self.tflops_per_gpu(self.split.recompute),
                "mfu": self.mfu, "memory_gib_per_gpu": self.memory_gib,
                "memory_gib": {k: v / GIB for k, v in self.memory.items()},
                "step_split_s": dict(self.parts), "fits": self.fits, "gpu_memory_gib": self.cluster.memory}


def predict(shape: Shape, split: Split, cluster: Cluster) -> Prediction:
    """The step and memory of `split` (check() first: a split it refuses is not priced)."""
    mb = micro_batch_parts(shape, split, cluster)
    per_mb = sum(mb.values())
    m = split.micro_batches
    bubble = (split.pp - 1) / split.interleave * per_mb
    dp = dp_comm_s(shape, split, cluster)
    parts = {"compute": m * mb["compute"], "tp_comm": m * mb["tp_comm"], "bubble": bubble,
             "pp_p2p": m * mb["pp_p2p"], "dp_comm": dp}
    # exposed: what is not compute (nothing here overlaps, module doc), the share a faster GPU
    # would not remove
    parts["exposed"] = parts["tp_comm"] + bubble + parts["pp_p2p"] + dp
    return Prediction(shape, split, cluster, parts, memory_bytes(shape, split))
