"""The performance model of hybrid-parallel GPT training: memory a GPU and the time of a step, from
the model's shape, the split (TP x CP x PP x DP x EP, sharding, recomputation, uneven stages,
overlap) and the cluster (perfmodel/hybrid_split.py's records). Pure code; the collectives are
perfmodel/hybrid_comm.py's; docs/guide/plan.md says how each newer feature is priced.

Step (one global batch), for m = global_batch / (dp x micro_batch) micro-batches a pipeline:

    micro-batch   compute: the training FLOPs of its tokens (measure/flops.py, with the recomputed
                  forward) / (tp x pp x cp) at the GPU's peak x GEMM efficiency (below), under FP8
                  the linear GEMMs at the FP8 peak (Work); TP: 4 collectives a layer (2 forward, 2
                  backward; 6 with full recomputation) of the micro-batch's activations (b s h x 2
                  bytes), ring all-reduce over NVLink, or reduce-scatter + all-gather with sequence
                  parallelism (the same bytes); exposed unless --tp-comm-overlap; PP: an activation
                  forward and a gradient back a stage, b s h x 2 / tp bytes over the network; CP's
                  ring, sep's and EP's all-to-alls (hybrid_comm)
    pipeline      (m + (pp - 1) / v) micro-batches: 1F1B's bubble is (pp - 1) micro-batch times,
                  the interleaved schedule's (v model chunks a GPU) (pp - 1) / v (Narayanan, sec. 2.2);
                  uneven stages: (m - 1) x the slowest stage + every stage once (/ v)
    DP/sharding   the gradients a GPU holds (bf16/fp16: 2 bytes a parameter) all-reduced over the dp
                  group with perfmodel/nccl.py (ring or tree, NVLink inside a node, the NICs across);
                  sharding stage 1 reduce-scatters + all-gathers the same bytes once a step; stage 2
                  every micro-batch (a rank keeps only its gradient shard, so accumulation cannot
                  wait); stage 3 gathers each layer's weights forward and backward and scatters its
                  gradients every micro-batch, prefetched under the layer before; exposed (after
                  backward), as Megatron-LM's 2021 code and Paddle's sharding without overlap run it,
                  unless --overlap-grad-reduce / --overlap-param-gather

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
    plus the fp32 logits of one micro-batch (4 s b V / t). GQA, head widths, MoE and FP8 generalise
    the 10 and 24 (_activation_terms); CP and sep divide them; uneven stages are priced one by one.
"""
from __future__ import annotations

import dataclasses

from fleetbench.measure import devices, flops
from fleetbench.perfmodel import hybrid_comm as comm
from fleetbench.perfmodel.hybrid_split import OVERLAPS, Cluster, Moe, Shape, Split, check, fold_stages  # noqa: F401 (the model's records)

GIB = 2 ** 30
EFF_MAX = 0.66         # fitted: perfmodel/hybrid_tables.py fit() on Megatron-LM's Table 1
EFF_HALF_WIDTH = 0.0    # fitted with it: no width dependence left once memory-bound work is priced
MEM_TRAFFIC = 6.0      # fitted with them: bytes moved a byte of stored activation and pass
FP8_GEMM_SHARE = 1.0   # assumed, not fitted (no fit table runs FP8): an FP8 GEMM reaches the bf16 share of its peak
FP8_CACHE_BYTES = 2    # TE's FP8 copy of a linear weight and its transpose, kept across micro-batches
AMAX_HISTORY = 1024    # TE's default amax history: fp32 scales a GEMM's input, weight and gradient
GEMMS_A_LAYER = 4      # QKV, output projection, MLP up (and gate), MLP down


def gemm_efficiency(shape: Shape, split: Split) -> float:
    width = shape.hidden / split.tp
    return EFF_MAX * width / (width + EFF_HALF_WIDTH)


@dataclasses.dataclass(frozen=True)
class Work:
    """Training FLOPs a token (with the recomputed forward), by where they run: `gemm` the linear
    layers' GEMMs (QKV, output projection, MLP, shared experts), `experts` the routed experts'
    (both FP8 under Transformer Engine), `other` the attention scores, the logits and the router
    (bf16 in TE and Megatron: core attention, the output layer and the router stay in high precision)."""
    gemm: float
    experts: float
    other: float

    @property
    def total(self) -> float:
        return self.gemm + self.experts + self.other


def work_per_token(shape: Shape, recompute: str) -> Work:
    dense, scores = flops.layer_forward_flops(shape.hidden, shape.seq, shape.ffn, shape.gated,
                                              kv_share=shape.kv_share, attention_width=shape.attention_width)
    m = shape.moe_shape
    router = 2 * shape.hidden * m.num_experts * m.layers if m else 0.0
    routed = m.layers * m.top_k * 2 * shape.expert_mlp_parameters() if m else 0.0
    gemm_fwd = shape.layers * dense + flops.moe_extra_flops(shape.hidden, shape.ffn, shape.gated, m) - router - routed
    again = {"full": 1.0, "selective": 0.0, "none": 0.0}[recompute]
    other = 3 * (shape.layers * scores + router + 2 * shape.hidden * shape.vocab) + again * router
    other += shape.layers * scores if recompute != "none" else 0.0
    return Work((3 + again) * gemm_fwd, (3 + again) * routed, other)


def _activation_terms(shape: Shape, fp8: bool) -> tuple[float, float]:
    """(replicated over TP, split over TP) bytes a token and layer in units of the hidden size,
    Korthikanti's 10 and 24 generalised. Replicated: the norms' inputs 4, the QKV input 2, two
    dropout masks 2, the MLP input 2; split: Q and the output projection's input at heads x head_dim
    (2 + 2), K and V at the kv heads' width (2 + 2), the MLP's 16 (GELU's input and fc2's at 4h,
    Korthikanti's count, kept for any width). An MoE layer's routed tokens (top_k x imbalance +
    shared experts of them) keep 2 (their input) + 4 x the expert width each. Under FP8 the linear
    layers keep their inputs in 1 byte: QKV's and the MLP's input, the projection's, fc2's."""
    q = (shape.attention_width or shape.hidden) / shape.hidden
    byte = 0.5 if fp8 else 1.0  # an FP8-kept input's bytes, of its bf16 ones
    replicated = 4 + 2 + 2 * byte
    attention = 2 * q + 2 * q * byte + 4 * q * shape.kv_share
    dense_in, dense_mlp = 2 * byte, 8 + 8 * byte
    if shape.moe is None:
        return replicated + dense_in, attention + dense_mlp
    width = (shape.moe.ffn or shape.ffn or 4 * shape.hidden) / shape.hidden
    share = shape.moe_layers / shape.layers
    tokens = shape.moe.top_k * shape.moe.load + shape.moe.shared
    routed = tokens * (2 * byte + 2 * width + 2 * width * byte)
    return replicated + (1 - share) * dense_in, attention + (1 - share) * dense_mlp + share * routed


def layer_activation_bytes(shape: Shape, split: Split, recompute: str, fp8: bool = False) -> float:
    """Korthikanti's activation bytes of one layer and micro-batch a GPU keeps (module doc), divided
    among the CP (or sep) ranks that split the sequence."""
    s, b, h, t, a = shape.seq, split.micro_batch, shape.hidden, split.tp, shape.heads
    scores = 0.0 if shape.flash or recompute != "none" else 5 * a * s / h
    seq_split = split.cp * split.sep
    if recompute == "full":
        return 2 * s * b * h / (t if split.sequence_parallel else 1) / seq_split
    replicated, per_tp = _activation_terms(shape, fp8)
    if split.sequence_parallel:
        return s * b * h / t * (replicated + per_tp + scores) / seq_split
    return s * b * h * (replicated + per_tp / t + scores / t) / seq_split


def memory_bound_s(shape: Shape, split: Split, cluster: Cluster, layers: float, per: int = 1) -> float:
    """Seconds of a micro-batch's memory-bound work on `layers` / `per` layers: MEM_TRAFFIC x the
    activation bytes a layer writes (Korthikanti's count, which holds what its norms, dropouts,
    softmax and GELU touch, replicated across TP ranks unless sequence-parallel), per pass (forward,
    twice backward, and the recomputed forward), at the GPU's memory bandwidth."""
    stored = layer_activation_bytes(shape, split, "none")
    passes = 3.0
    if split.recompute == "full":
        passes += 1.0
    elif split.recompute == "selective" and not shape.flash:
        passes += 1.0 - layer_activation_bytes(shape, split, "selective") / stored
    hbm = (devices.hbm_GBps(cluster.gpu) or 1000.0) * 1e9
    return MEM_TRAFFIC * stored * passes / 3.0 * layers / per / hbm


def _fp8_cast_s(shape: Shape, split: Split, cluster: Cluster, layers: float) -> float:
    """Transformer Engine's casts to FP8 a micro-batch: each linear layer's input forward and its
    output gradient backward read in bf16 and written in FP8 (3 bytes an element)."""
    h, f = shape.hidden, (shape.ffn or 4 * shape.hidden)
    width = shape.attention_width or h
    elements = 2 * (2 * h + width + f) * split.micro_batch * shape.seq / (split.tp * split.cp * split.sep)
    return 3 * elements * layers / ((devices.hbm_GBps(cluster.gpu) or 1000.0) * 1e9)


def _compute_s(shape: Shape, split: Split, cluster: Cluster, layers: float, per: int, logits: float) -> float:
    """A micro-batch's compute on a stage of `layers` / `per` layers holding `logits` of the logits'
    work (1 / pp when the stages are even: spread as the even model does)."""
    tokens = split.micro_batch * shape.seq
    eff = gemm_efficiency(shape, split)
    bound = memory_bound_s(shape, split, cluster, layers, per)
    load = shape.moe.load if shape.moe else 1.0
    if cluster.fp8_flops is None and load == 1.0 and split.stage_layers is None:
        work = shape.flops_per_token(split.recompute) * tokens / (split.tp * split.pp * split.cp * split.sep)
        return work / (cluster.peak_flops * eff) + bound
    w = work_per_token(shape, split.recompute)
    head = 3 * 2 * shape.hidden * shape.vocab
    share = layers / per / shape.layers
    ranks_tokens = tokens / (split.tp * split.cp * split.sep)
    gemm_rate = (cluster.fp8_flops * FP8_GEMM_SHARE if cluster.fp8_flops else cluster.peak_flops) * eff
    gemm_s = (w.gemm + w.experts * load) * share * ranks_tokens / gemm_rate
    other_s = ((w.other - head) * share + head * logits) * ranks_tokens / (cluster.peak_flops * eff)
    cast = _fp8_cast_s(shape, split, cluster, layers / per) if cluster.fp8_flops else 0.0
    return gemm_s + other_s + bound + cast


def gemm_share(shape: Shape, split: Split, cluster: Cluster) -> float:
    """The share of a micro-batch's compute in the linear GEMMs: the window TP's overlap hides in."""
    w = work_per_token(shape, split.recompute)
    fast = (cluster.fp8_flops or cluster.peak_flops) / cluster.peak_flops
    return (w.gemm + w.experts) / fast / ((w.gemm + w.experts) / fast + w.other)


@dataclasses.dataclass(frozen=True)
class Prediction:
    shape: Shape
    split: Split
    cluster: Cluster
    parts: dict        # seconds a step: compute, tp_comm, bubble, pp_p2p, dp_comm, exposed
    memory: dict       # bytes a GPU: weights, gradients, optimizer, activations (the fullest stage's)
    hidden: dict = dataclasses.field(default_factory=dict)  # seconds overlapped with compute, by part

    @property
    def step_s(self) -> float:
        return sum(v for k, v in self.parts.items() if k != "exposed")

    @property
    def tokens_per_s(self) -> float:
        return self.split.global_batch * self.shape.seq / self.step_s

    @property
    def fp8(self) -> bool:
        return self.cluster.fp8_flops is not None

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
        return {"split": _split_json(self.split), "step_s": self.step_s,
                "tokens_per_s": self.tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s / self.split.gpus,
                "tflops_per_gpu": self.tflops_per_gpu(), "hw_tflops_per_gpu": self.tflops_per_gpu(self.split.recompute),
                "mfu": self.mfu, "memory_gib_per_gpu": self.memory_gib,
                "memory_gib": {k: v / GIB for k, v in self.memory.items()},
                "step_split_s": dict(self.parts), "fits": self.fits, "gpu_memory_gib": self.cluster.memory,
                **({"hidden_s": dict(self.hidden)} if self.hidden else {})}


def _split_json(split: Split) -> dict:
    """The split's fields, those of the newer dimensions only where they are set."""
    found = dataclasses.asdict(split)
    defaults = {"cp": 1, "sep": 1, "ep": 1, "stage_layers": None, "overlap": frozenset(),
                "distributed_optimizer": False, "shard_group": None, "etp": None}
    found = {k: v for k, v in found.items() if k not in defaults or v != defaults[k]}
    if "overlap" in found:
        found["overlap"] = sorted(found["overlap"])
    return found


def _stage_memory(shape: Shape, split: Split, fp8: bool, stage: tuple) -> dict:
    """Bytes a GPU of one stage holds: `stage` (layers, divisor, embedding copies, logits, micro-batches
    in flight); the even stages' is the first's, the embedding and logits on it (module doc)."""
    layers, per, embed, logits, in_flight = stage
    if shape.moe is None:
        per_layer = shape.parameters() - shape.vocab * shape.hidden
        params, experts = (per_layer / shape.layers * layers / per + embed * shape.vocab * shape.hidden) / split.tp, 0.0
    else:
        params, experts = comm.stage_parameters(shape, split, layers / per)
        params += embed * shape.vocab * shape.hidden / split.tp
    shard = split.shard_degree * split.cp if split.sharding_stage or split.distributed_optimizer else 1
    expert_shard = max(1, shard * split.tp // split.expert_split) if shard > 1 else 1
    st = split.sharding_stage
    weights = 2 * params / (shard if st >= 3 else 1) + 2 * experts / (expert_shard if st >= 3 else 1)
    grad_bytes = 4 if split.distributed_optimizer else 2  # Megatron's distributed optimizer keeps fp32 grads
    grads = grad_bytes * (params / (shard if st >= 2 else 1) + experts / (expert_shard if st >= 2 else 1))
    optimizer = 12 * params / shard + 12 * experts / expert_shard
    if st >= 3:  # the layer computing and the one prefetched, gathered whole; one layer's gradients before their reduce-scatter
        layer = sum(comm.stage_parameters(shape, split, 1))
        weights, grads = weights + 2 * 2 * layer, grads + 2 * layer
    s, b, t = shape.seq, split.micro_batch, split.tp
    layer = layer_activation_bytes(shape, split, split.recompute, fp8)
    activations = layer * layers / per * in_flight + logits * 4 * s * b * shape.vocab / t / (split.cp * split.sep)
    found = {"weights": weights, "gradients": grads, "optimizer": optimizer, "activations": activations}
    if fp8:
        scales = GEMMS_A_LAYER * 3 * AMAX_HISTORY * 4 * layers / per
        found["fp8_weights"] = (FP8_CACHE_BYTES * (params + experts) / (shard if st >= 3 else 1)) + scales
    return found


def _stages(shape: Shape, split: Split) -> list[tuple]:
    """(layers, divisor, embedding copies, logits, micro-batches in flight) a stage to price: the even
    model's one (the first stage's, the fullest), or each of --stage-layers' (module doc)."""
    m = split.micro_batches
    if split.stage_layers is None:
        in_flight = min(m, split.pp)
        if split.interleave > 1:
            in_flight *= 1 + (split.pp - 1) / (split.pp * split.interleave)
        return [(shape.layers, split.pp, 1, 1, in_flight)]
    last, v = split.pp - 1, split.interleave
    # interleaved: a stage's first chunk's micro-batches in flight as the even model counts them
    flight = [min(m, split.pp - i) * (1 + (split.pp - 1) / (split.pp * v) if v > 1 else 1) for i in range(split.pp)]
    return [(n, 1, (i == 0) + (i == last and last > 0), float(i == last), flight[i])
            for i, n in enumerate(split.stage_layers)]


def stage_memory(shape: Shape, split: Split, cluster: Cluster | None = None) -> list[dict]:
    """The memory of every stage that can be the fullest: of stages alike but for the micro-batches
    in flight, the first (most in flight) only."""
    fp8 = cluster is not None and cluster.fp8_flops is not None
    firsts = {}
    for stage in _stages(shape, split):
        firsts.setdefault(stage[:4], stage)
    return [_stage_memory(shape, split, fp8, stage) for stage in firsts.values()]


def memory_bytes(shape: Shape, split: Split, cluster: Cluster | None = None) -> dict:
    """Bytes a GPU holds (module doc), the fullest pipeline stage's."""
    return max(stage_memory(shape, split, cluster), key=lambda d: sum(d.values()))


def _cp_s(shape: Shape, split: Split, cluster: Cluster, layers: float) -> tuple[float, float]:
    """(exposed, hidden) seconds of ring attention's K/V exchange a micro-batch: cp - 1 steps a
    layer forward (K, V) and twice that backward (K, V and their gradients), each hiding under the
    attention-score work of the chunk it waits for (the scores' share of the compute model's rate)."""
    if split.cp == 1:
        return 0.0, 0.0
    _, scores = flops.layer_forward_flops(shape.hidden, shape.seq, kv_share=shape.kv_share,
                                          attention_width=shape.attention_width)
    tokens = split.micro_batch * shape.seq / split.cp
    chunk_s = scores * tokens / split.cp / split.tp / (cluster.peak_flops * gemm_efficiency(shape, split))
    send = comm.cp_ring_step_s(shape, split, cluster)
    steps = layers * (split.cp - 1) * (4 if split.recompute == "full" else 3)
    exposed = steps * max(0.0, send - chunk_s)
    return exposed, steps * send - exposed


def _stage_parts(shape: Shape, split: Split, cluster: Cluster, stage: tuple) -> tuple[dict, dict]:
    """(exposed, hidden) seconds of one micro-batch on a stage, by part."""
    layers, per, _, logits, _ = stage
    logits_share = 1 / split.pp if split.stage_layers is None else logits
    compute = _compute_s(shape, split, cluster, layers, per, logits_share)
    tp_s = comm.tp_comm_s(shape, split, cluster, layers / per)
    hidden = {}
    if "tp_comm" in split.overlap:
        # decomposed into tp chunks (ring exchange), the first chunk's transfer waits for nothing to hide under
        exposed = max(tp_s / split.tp, tp_s - compute * gemm_share(shape, split, cluster))
        hidden["tp_comm"], tp_s = tp_s - exposed, exposed
    parts = {"compute": compute, "tp_comm": tp_s, "pp_p2p": comm.pp_p2p_s(shape, split, cluster)}
    if split.cp > 1:
        parts["cp_comm"], hidden["cp_comm"] = _cp_s(shape, split, cluster, layers / per)
    if split.sep > 1:
        parts["sep_comm"] = comm.sep_alltoall_s(shape, split, cluster, layers / per)
    if split.ep > 1:
        parts["ep_comm"] = comm.ep_alltoall_s(shape, split, cluster, layers / per)
        if "ep_a2a" in split.overlap:  # Megatron's 1F1B all-to-all overlap: under another micro-batch's compute
            exposed = max(0.0, parts["ep_comm"] - compute)
            hidden["ep_comm"], parts["ep_comm"] = parts["ep_comm"] - exposed, exposed
    return parts, hidden


def _zero3_s(shape: Shape, split: Split, cluster: Cluster, mb: dict, layers: float) -> tuple[float, float]:
    """(exposed, hidden) seconds a step of sharding stage 3's per-layer gathers: every micro-batch
    gathers a layer's weights forward and again backward, and reduce-scatters its gradients, over the
    shard group (ring, latency at that width: hybrid_comm); the next layer's are prefetched while
    this one computes (FSDP's backward prefetch, DeepSpeed's and Paddle's prefetch), so a layer
    exposes only what its compute cannot cover, plus the first gather."""
    gather, scatter = comm.zero3_layer_s(shape, split, cluster)
    forward = mb["compute"] / layers / 3
    per_mb = layers * (max(0.0, gather - forward) + max(0.0, gather + scatter - 2 * forward)) + gather
    total = layers * (2 * gather + scatter)
    replica = comm.replica_allreduce_s(shape, split, cluster)
    m = split.micro_batches
    return m * per_mb + replica, m * max(0.0, total - per_mb + gather)


def _dp_s(shape: Shape, split: Split, cluster: Cluster, mb: dict, layers: float) -> tuple[float, float]:
    """(exposed, hidden) seconds a step of the gradient reduction (and the distributed optimizer's
    weight gather): overlapped as Megatron-Core does with --overlap-grad-reduce (bucket by bucket
    under the last micro-batch's backward, all micro-batches' under sharding stage 2; the last bucket
    waits) and --overlap-param-gather (under the next step's first forward)."""
    if split.sharding_stage == 3:
        return _zero3_s(shape, split, cluster, mb, layers)
    total = comm.dp_comm_s(shape, split, cluster) + comm.replica_allreduce_s(shape, split, cluster)
    gathered = split.distributed_optimizer or split.sharding_stage == 1
    grad, param = (total / 2, total / 2) if gathered else (total, 0.0)
    exposed = grad + param
    if "grad_reduce" in split.overlap:
        window = mb["compute"] * 2 / 3 * (split.micro_batches if split.sharding_stage == 2 else 1)
        buckets = max(1.0, shape.parameters() / (split.tp * split.pp) * comm.ACT_BYTES / comm.BUCKET_BYTES)
        exposed = max(grad - window, grad / buckets) + param
    if "param_gather" in split.overlap:
        exposed -= param - max(0.0, param - mb["compute"] / 3)
    return exposed, total - exposed


def predict(shape: Shape, split: Split, cluster: Cluster) -> Prediction:
    """The step and memory of `split` (check() first: a split it refuses is not priced)."""
    stages = _stages(shape, split)
    alike = {}  # stages of the same layers and logits take the same time
    priced = [alike.setdefault(stage[:4], _stage_parts(shape, split, cluster, stage)) if stage[:4] not in alike
              else alike[stage[:4]] for stage in stages]
    totals = [sum(parts.values()) for parts, _ in priced]
    slowest = max(range(len(totals)), key=totals.__getitem__)
    mb, mb_hidden = priced[slowest]
    m = split.micro_batches
    if split.stage_layers is None:
        bubble = (split.pp - 1) / split.interleave * totals[0]
    else:  # 1F1B with unequal stages: (m - 1) slowest-stage times + every stage's once, / v interleaved
        bubble = (sum(totals) - totals[slowest]) / split.interleave
    dp, dp_hidden = _dp_s(shape, split, cluster, mb, stages[slowest][0] / stages[slowest][1])
    parts = {"compute": m * mb["compute"], "tp_comm": m * mb["tp_comm"], "bubble": bubble,
             "pp_p2p": m * mb["pp_p2p"], "dp_comm": dp}
    extra = {k: m * v for k, v in mb.items() if k not in parts}
    parts.update(extra)
    # exposed: what is not compute, the share a faster GPU would not remove
    parts["exposed"] = parts["tp_comm"] + bubble + parts["pp_p2p"] + dp + sum(extra.values())
    hidden = {k: m * v for k, v in mb_hidden.items() if v}
    if dp_hidden:
        hidden["dp_comm"] = dp_hidden
    return Prediction(shape, split, cluster, parts, memory_bytes(shape, split, cluster), hidden)
