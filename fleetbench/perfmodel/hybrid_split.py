"""What `fleetbench plan` prices, as records: the model's shape (dense, grouped-query attention, a
head width of its own, mixture-of-experts), the split (TP x CP x PP x DP, expert parallelism,
sharding, recomputation, uneven pipeline stages, overlapped communication) and the cluster (a GPU of
measure/devices.py, or one given by its figures; bf16 or FP8), and check(): why a split cannot run a
model, in one line. Pure code; perfmodel/hybrid.py prices them.
"""
from __future__ import annotations

import dataclasses
import functools

from fleetbench.measure import devices, flops


@dataclasses.dataclass(frozen=True)
class Moe:
    """Mixture-of-experts MLPs (Switch, Mixtral, DeepSeek): `experts` routed experts a layer, each
    token to `top_k` of them, `shared` experts every token runs beside them, of width `ffn` (None: the
    dense MLP's), in every layer but the first `dense_layers`. `imbalance`: the tokens the busiest
    expert gets over the mean (1: a perfectly balanced router; the step waits for the busiest);
    `capacity_factor` C caps an expert at C x the mean (tokens over it dropped, Megatron's
    --moe-expert-capacity-factor), so the busiest expert computes min(imbalance, C) x the mean."""
    experts: int
    top_k: int
    ffn: int | None = None
    shared: int = 0
    dense_layers: int = 0
    capacity_factor: float | None = None
    imbalance: float = 1.0

    @property
    def load(self) -> float:
        """The busiest expert's tokens over the mean: what the expert GEMMs and the all-to-all wait for."""
        return min(self.imbalance, self.capacity_factor) if self.capacity_factor else self.imbalance


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
    kv_heads: int | None = None  # grouped-query attention's K/V heads (None: heads, 1: multi-query)
    head_dim: int | None = None  # a head's width (None: hidden / heads)
    moe: Moe | None = None

    @property
    def attention_width(self) -> int | None:
        """heads x head_dim where the shape names a head width, else None (the hidden size)."""
        return None if self.head_dim is None else self.heads * self.head_dim

    @property
    def kv_share(self) -> float:
        return 1.0 if self.kv_heads is None else self.kv_heads / self.heads

    @property
    def moe_layers(self) -> int:
        return self.layers - self.moe.dense_layers if self.moe else 0

    @property
    def moe_shape(self) -> flops.MoeShape | None:
        m = self.moe
        return None if m is None else flops.MoeShape(m.experts, m.top_k, self.moe_layers, m.ffn, m.shared)

    def parameters(self) -> float:
        """All parameters held (every expert), the embedding tied with the logits."""
        return self._parameters

    @functools.cached_property  # a search asks it of one shape for every split it prices
    def _parameters(self) -> float:
        m = self.moe
        if m is None:
            return flops.gpt_parameters(self.layers, self.hidden, self.vocab, self.ffn, self.gated,
                                        kv_share=self.kv_share, attention_width=self.attention_width)
        return flops.gpt_parameters(self.layers, self.hidden, self.vocab, self.ffn, self.gated,
                                    kv_share=self.kv_share, attention_width=self.attention_width,
                                    experts=m.experts, moe_layers=self.moe_layers, moe_ffn=m.ffn, shared=m.shared)

    def expert_mlp_parameters(self) -> float:
        """One routed expert's MLP matrices."""
        f = (self.moe.ffn if self.moe else None) or self.ffn or 4 * self.hidden
        return float((3 if self.gated else 2) * self.hidden * f)

    @functools.cached_property
    def _routed(self) -> float:
        return self.moe_layers * self.moe.experts * self.expert_mlp_parameters() if self.moe else 0.0

    def routed_expert_parameters(self) -> float:
        """The routed experts' parameters (split over EP); the rest is replicated across it."""
        return self._routed

    def active_parameters(self) -> float:
        """Parameters a token runs through: top_k routed experts of each MoE layer (MFU's count)."""
        if self.moe is None:
            return self.parameters()
        return self.parameters() - self.moe_layers * (self.moe.experts - self.moe.top_k) * self.expert_mlp_parameters()

    def flops_per_token(self, recompute: str = "none") -> float:
        if self.moe is None and self.kv_heads is None and self.head_dim is None:
            return flops.gpt_train_flops_per_token(self.layers, self.hidden, self.seq, self.vocab, self.ffn,
                                                   self.gated, recompute)
        return flops.gpt_train_flops_per_token(self.layers, self.hidden, self.seq, self.vocab, self.ffn, self.gated,
                                               recompute, kv_share=self.kv_share, moe=self.moe_shape,
                                               attention_width=self.attention_width)


OVERLAPS = ("grad_reduce", "param_gather", "tp_comm", "ep_a2a")


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
    cp: int = 1                       # context parallelism: ring attention over cp ranks (Megatron)
    sep: int = 1                      # Paddle's segment parallelism: all-to-all of Q, K, V (Ulysses)
    ep: int = 1                       # expert parallelism, carved out of dp x cp
    stage_layers: tuple | None = None  # layers a pipeline stage (None: layers / pp each)
    overlap: frozenset = frozenset()  # of OVERLAPS: what Megatron-Core overlaps with compute
    distributed_optimizer: bool = False  # Megatron's: optimizer state sharded over dp (fp32 grads)
    shard_group: int | None = None    # FSDP hybrid sharding: shard over this many dp ranks, replicate across
    etp: int | None = None            # expert TP (None: the experts split over tp like the dense MLP)

    @property
    def expert_split(self) -> int:
        """The GPUs one set of experts is divided among: expert TP x EP."""
        return (self.etp or self.tp) * self.ep

    @property
    def expert_dp(self) -> int:
        """Replicas of an expert: the tp x dp x cp ranks a stage has over expert TP x EP (MoE
        parallel folding: with expert TP below tp, EP spans TP ranks too)."""
        return self.tp * self.dp * self.cp // self.expert_split

    @property
    def ep_span(self) -> int:
        """Consecutive GPUs an EP group spans (TP innermost, then CP, then DP)."""
        return self.etp * self.ep if self.etp else self.tp * self.cp * self.ep

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp * self.sep

    @property
    def micro_batches(self) -> int:
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def shard_degree(self) -> int:
        """The ranks a sharded state is divided among (the dp group, or FSDP's shard group)."""
        return self.shard_group or self.dp

    def label(self) -> str:
        extra = [f"{k}{v}" for k, v in (("cp", self.cp), ("sep", self.sep), ("ep", self.ep)) if v > 1]
        extra += [f"etp{self.etp}"] if self.etp is not None else []
        extra += [f"sharding{self.sharding_stage}"] if self.sharding_stage else []
        extra += [f"hsdp{self.shard_group}"] if self.shard_group else []
        extra += ["distopt"] if self.distributed_optimizer else []
        extra += ["sp"] if self.sequence_parallel else []
        extra += [f"v{self.interleave}"] if self.interleave > 1 else []
        extra += ["stages " + _runs(self.stage_layers)] if self.stage_layers else []
        extra += ["overlap " + "+".join(sorted(self.overlap))] if self.overlap else []
        return (f"tp{self.tp} pp{self.pp} dp{self.dp} mb{self.micro_batch} {self.recompute}"
                + "".join(" " + e for e in extra))


def fold_stages(stages: tuple, pp: int) -> tuple:
    """Layers a GPU's stage holds from layers a virtual stage (pp x v of them, Megatron's order:
    virtual stage j on GPU j mod pp); layers a stage (pp of them) as they are."""
    if len(stages) <= pp or len(stages) % pp:
        return tuple(stages)
    return tuple(sum(stages[i::pp]) for i in range(pp))


def _runs(counts: tuple) -> str:
    """Layer counts with repeats folded: (7, 8, 8, 8, 7) -> 7,8x3,7."""
    runs: list[list[int]] = []
    for n in counts:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return ",".join(f"{n}x{k}" if k > 1 else str(n) for n, k in runs)


@dataclasses.dataclass(frozen=True)
class Cluster:
    gpu: str                 # a name measure/devices.py knows
    gpus_per_node: int
    nics: int = 8            # NICs a node (rails)
    nic_gbit: float = 200.0  # line rate a NIC
    precision: str = "bf16"
    memory_gib: float | None = None  # None: the device's default memory
    tflops: float | None = None      # the GPU's own dense bf16 peak (a power-capped part): every peak scales

    @property
    def device(self) -> devices.Device:
        found = devices.lookup(self.gpu)
        if found is None:
            raise ValueError(f"unknown GPU {self.gpu!r} (known: {devices.known()})")
        return found

    def _peak(self, precision: str) -> float:
        scale = self.tflops / self.device.peak_tflops("bf16") if self.tflops else 1.0
        return self.device.peak_tflops(precision) * scale * 1e12

    @property
    def peak_flops(self) -> float:
        """The peak MFU is taken against: the precision's, and bf16's for FP8 (as published MFU is)."""
        return self._peak("bf16" if self.precision == "fp8" else self.precision)

    @property
    def fp8_flops(self) -> float | None:
        """The FP8 peak the FP8 GEMMs run at, or None below FP8."""
        return self._peak("fp8") if self.precision == "fp8" else None

    @property
    def memory(self) -> float:
        return self.memory_gib or devices.memory_gib(self.gpu)


def _stage_problems(shape: Shape, split: Split) -> list:
    if split.stage_layers is None:
        return [(shape.layers % (split.pp * split.interleave),
                 f"layers {shape.layers} do not divide among pp {split.pp} x interleave {split.interleave}"
                 + (" (uneven stages: --stage-layers a,b,...)" if shape.layers % split.pp else ""))]
    stages = split.stage_layers
    return [(len(stages) != split.pp, f"--stage-layers has {len(stages)} stages, expected pp {split.pp}"),
            (sum(stages) != shape.layers, f"--stage-layers sum to {sum(stages)}, expected the {shape.layers} layers"),
            (min(stages) < 1, "--stage-layers: expected every stage to hold a layer")]


def _attention_problems(shape: Shape, split: Split) -> list:
    kv = shape.kv_heads or shape.heads
    heads_split = split.tp * split.sep
    return [
        (shape.head_dim is None and shape.hidden % shape.heads,
         f"hidden {shape.hidden} is not a multiple of heads {shape.heads}"),
        (shape.heads % kv, f"heads {shape.heads} are not a multiple of kv heads {kv}"),
        (shape.heads % heads_split, f"heads {shape.heads} do not divide among tp {split.tp}"
                                    + (f" x sep {split.sep}" if split.sep > 1 else "")),
        (kv % split.tp and split.tp % kv,
         f"kv heads {kv} and tp {split.tp}: expected one to divide the other (K/V heads split or replicated over TP)"),
        (shape.seq % (2 * split.cp) if split.cp > 1 else 0,
         f"seq {shape.seq} is not a multiple of 2 x cp {split.cp} (ring attention's load-balanced chunks)"),
        (shape.seq % split.sep, f"seq {shape.seq} is not a multiple of sep {split.sep}"),
        (split.cp > 1 and split.sep > 1, "--cp and --sep: expected one (two kinds of sequence split)"),
    ]


def _expert_problems(shape: Shape, split: Split) -> list:
    m = shape.moe
    if m is None:
        return [(split.ep > 1 or split.etp is not None, "--ep or --etp without --experts: expected an MoE model")]
    return [(m.top_k > m.experts, f"--top-k {m.top_k} exceeds --experts {m.experts}"),
            (m.experts % split.ep, f"--experts {m.experts} do not divide among ep {split.ep}"),
            (split.etp is None and (split.dp * split.cp) % split.ep,
             f"ep {split.ep} does not divide dp x cp ({split.dp * split.cp}) (EP across TP ranks: --etp)"),
            (split.etp is not None and (split.tp * split.dp * split.cp) % split.expert_split,
             f"etp {split.etp} x ep {split.ep} does not divide tp x dp x cp ({split.tp * split.dp * split.cp})"),
            (m.dense_layers >= shape.layers, f"--dense-layers {m.dense_layers}: expected fewer than the layers")]


def check(shape: Shape, split: Split, cluster: Cluster) -> str | None:
    """Why this split cannot run this model (one line), or None."""
    problems = _attention_problems(shape, split) + _stage_problems(shape, split) + _expert_problems(shape, split) + [
        (split.global_batch % (split.dp * split.micro_batch),
         f"global batch {split.global_batch} is not a multiple of dp {split.dp} x micro-batch {split.micro_batch}"),
        (split.tp * split.sep > cluster.gpus_per_node and split.sep > 1,
         f"tp {split.tp} x sep {split.sep} spans more than a node's {cluster.gpus_per_node} GPUs"),
        (split.tp > cluster.gpus_per_node, f"tp {split.tp} spans more than a node's {cluster.gpus_per_node} GPUs"),
        (split.sequence_parallel and split.tp == 1, "sequence parallelism needs tp > 1"),
        ("tp_comm" in split.overlap and not split.sequence_parallel,
         "--tp-comm-overlap needs --sequence-parallel (its all-gathers and reduce-scatters are what overlap)"),
        ("param_gather" in split.overlap and not (split.distributed_optimizer or split.sharding_stage),
         "--overlap-param-gather needs --distributed-optimizer or a sharding stage (only they gather weights)"),
        ("ep_a2a" in split.overlap and split.ep == 1, "--ep-a2a-overlap needs --ep > 1 (an all-to-all to overlap)"),
        (split.distributed_optimizer and split.sharding_stage, "--distributed-optimizer with --sharding-stage: expected one"),
        (split.shard_group is not None and (split.sharding_stage < 2 or split.dp % (split.shard_group or 1)),
         f"--shard-group {split.shard_group}: expected a divisor of dp {split.dp} with sharding stage 2 or 3"),
        (split.interleave > 1 and split.pp == 1, "an interleaved schedule needs pp > 1"),
        (split.interleave > 1 and split.micro_batches % split.pp,
         f"the interleaved schedule needs micro-batches ({split.micro_batches}) a multiple of pp {split.pp}"),
    ]
    return next((why for bad, why in problems if bad), None)
