"""A decoder-only, pre-LN GPT for collective/gpt.py, with LLaMA's options (RMSNorm, SwiGLU, rotary
positions, grouped-query attention), mixture-of-experts MLPs (workloads/moe.py) and Fleet's model
parallelism: tensor-parallel layers from fleet.meta_parallel when tp > 1 (ColumnParallelLinear /
RowParallelLinear / VocabParallelEmbedding / ParallelCrossEntropy; their sequence-parallel forms
with sequence_parallel), a PipelineLayer of LayerDescs when pp > 1, and recomputation (full: a
block; selective: attention's scores, softmax and context, the part Korthikanti et al. 2022
recompute).

Sequence parallelism (Korthikanti et al. 2022), wired as Paddle's fleet/utils/sequence_parallel_utils
expects it and as PaddleNLP's GPT uses it: the embedding's [b, s, h] is turned to [s, b, h] and cut
along s (ScatterOp: each TP rank keeps s/tp positions, hybrid.sequence_layout); norms and residuals
run on that cut; each column linear all-gathers s before its GEMM and each row linear
reduce-scatters after its own; attention runs on whole sequences between the two (turned back to
batch-first); the logits' column linear is the final gather, turned back to [b, s, vocab/tp] for
the parallel cross-entropy. The norms' weights and biases are marked (mark_sequence_parallel) so
that hybrid.prepare's all-reduce hooks sum their partial gradients over the TP group.

Tested for real on CPU: tp = pp = 1 (data parallel and sharding stage 1), with grouped-query
attention and with experts local to every rank. The tp, sp, pp and ep paths run only on GPU builds
(a CPU build refuses them before launch: train/hybrid.check) and are untested in kernels here
(docs/guide/gpt.md).
"""
from __future__ import annotations

from typing import Any

import paddle
import paddle.nn.functional as F
from paddle import nn
from paddle.distributed import fleet
from paddle.distributed.fleet.utils import recompute as recompute_fn

from fleetbench.train.workloads import moe

Cfg = Any  # collective/gpt.GptConfig (the script declares it; this module reads its keys)
Tensor = paddle.Tensor


class RMSNorm(nn.Layer):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter([hidden], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x: Tensor) -> Tensor:
        return x * paddle.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _norm(cfg: Cfg) -> nn.Layer:
    return RMSNorm(cfg.hidden_size) if cfg.norm == "rmsnorm" else nn.LayerNorm(cfg.hidden_size)


def _column(cfg: Cfg, fan_in: int, fan_out: int) -> nn.Layer:
    if cfg.tp == 1:
        return nn.Linear(fan_in, fan_out)
    if cfg.sequence_parallel:
        from paddle.distributed.fleet.utils import sequence_parallel_utils as spu
        return spu.ColumnSequenceParallelLinear(fan_in, fan_out, has_bias=True, gather_output=False)
    return fleet.meta_parallel.ColumnParallelLinear(fan_in, fan_out, has_bias=True, gather_output=False)


def _row(cfg: Cfg, fan_in: int, fan_out: int) -> nn.Layer:
    if cfg.tp == 1:
        return nn.Linear(fan_in, fan_out)
    if cfg.sequence_parallel:
        from paddle.distributed.fleet.utils import sequence_parallel_utils as spu
        return spu.RowSequenceParallelLinear(fan_in, fan_out, has_bias=True, input_is_parallel=True)
    return fleet.meta_parallel.RowParallelLinear(fan_in, fan_out, has_bias=True, input_is_parallel=True)


def rotate(x: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (Su et al.) of x [batch, seq, heads, head_dim]."""
    seq, dim = x.shape[1], x.shape[-1]
    inv = 1.0 / base ** (paddle.arange(0, dim, 2, dtype="float32") / dim)
    angles = paddle.outer(paddle.arange(seq, dtype="float32"), inv)  # [seq, dim/2]
    cos = paddle.concat([angles.cos()] * 2, -1).unsqueeze([0, 2]).astype(x.dtype)
    sin = paddle.concat([angles.sin()] * 2, -1).unsqueeze([0, 2]).astype(x.dtype)
    half = dim // 2
    rotated = paddle.concat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def core_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal softmax(q k^T / sqrt(d)) v over [batch, seq, heads, head_dim]."""
    q, k, v = (t.transpose([0, 2, 1, 3]) for t in (q, k, v))
    scores = paddle.matmul(q, k, transpose_y=True) / float(q.shape[-1]) ** 0.5
    seq = scores.shape[-1]
    mask = paddle.triu(paddle.full([seq, seq], float("-inf"), scores.dtype), 1)
    context = paddle.matmul(F.softmax(scores + mask, axis=-1), v)
    return context.transpose([0, 2, 1, 3])


def kv_heads(cfg: Cfg) -> int:
    """K/V heads: num_kv_heads (grouped-query attention; 1: multi-query), 0 meaning num_heads."""
    return cfg.num_kv_heads or cfg.num_heads


class Attention(nn.Layer):
    """Multi-head attention, grouped-query when num_kv_heads < num_heads: each K/V head serves
    num_heads / num_kv_heads query heads. The fused projection is laid out group by group (a KV
    head's query heads, then its K, then its V), so a column-parallel split hands each TP rank
    whole groups (num_kv_heads / tp of them); with one head a group it is the classic per-head layout."""

    def __init__(self, cfg: Cfg) -> None:
        super().__init__()
        self.cfg, self.heads, self.groups = cfg, cfg.num_heads // cfg.tp, kv_heads(cfg) // cfg.tp  # this rank's
        self.head_dim = cfg.hidden_size // cfg.num_heads
        fused = cfg.hidden_size + 2 * kv_heads(cfg) * self.head_dim
        self.qkv, self.out = _column(cfg, cfg.hidden_size, fused), _row(cfg, cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        qkv = self.qkv(x)  # with SP: [s, b, fused/tp], the all-gather inside restored the whole sequence
        if self.cfg.sequence_parallel:
            qkv = qkv.transpose([1, 0, 2])
        batch, seq, ratio, d = qkv.shape[0], qkv.shape[1], self.heads // self.groups, self.head_dim
        q, k, v = qkv.reshape([batch, seq, self.groups, (ratio + 2) * d]).split([ratio * d, d, d], axis=-1)
        q = q.reshape([batch, seq, self.heads, d])  # query head j belongs to group j // ratio
        if ratio > 1:  # each K/V head repeated for its group's query heads
            k, v = (t.repeat_interleave(ratio, axis=2) for t in (k, v))
        if self.cfg.position == "rotary":
            q, k = rotate(q), rotate(k)
        if self.cfg.recompute == "selective" and self.training:
            context = recompute_fn(core_attention, q, k, v)
        else:
            context = core_attention(q, k, v)
        context = context.reshape([batch, seq, -1])
        if self.cfg.sequence_parallel:  # sequence-first again: the row linear reduce-scatters along s
            context = context.transpose([1, 0, 2])
        return self.out(context)


class MLP(nn.Layer):
    def __init__(self, cfg: Cfg) -> None:
        super().__init__()
        width = cfg.ffn_hidden or 4 * cfg.hidden_size
        self.gated = cfg.mlp == "swiglu"
        self.up = _column(cfg, cfg.hidden_size, (2 if self.gated else 1) * width)
        self.down = _row(cfg, width, cfg.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        h = self.up(x)
        if self.gated:
            gate, up = h.chunk(2, axis=-1)
            return self.down(F.silu(gate) * up)
        return self.down(F.gelu(h))


def is_moe_layer(cfg: Cfg, index: int) -> bool:
    """Layer `index` (from 0) holds experts: every moe_every-th layer, the last of each run (GShard's
    every other layer with moe_every 2; Mixtral's every layer with 1)."""
    return cfg.num_experts > 0 and (index + 1) % cfg.moe_every == 0


class Block(nn.Layer):
    """Pre-LN: x + attention(norm(x)), then x + mlp(norm(x)); the MLP is experts in MoE layers."""

    def __init__(self, cfg: Cfg, index: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        mlp = moe.build(cfg, lambda: MLP(cfg)) if is_moe_layer(cfg, index) else MLP(cfg)
        self.norm1, self.attn, self.norm2, self.mlp = _norm(cfg), Attention(cfg), _norm(cfg), mlp

    def inner(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def forward(self, x: Tensor) -> Tensor:
        if self.cfg.recompute == "full" and self.training:
            return recompute_fn(self.inner, x)
        return self.inner(x)


class Embed(nn.Layer):
    def __init__(self, cfg: Cfg) -> None:
        super().__init__()
        self.cfg = cfg
        self.word = (fleet.meta_parallel.VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size) if cfg.tp > 1
                     else nn.Embedding(cfg.vocab_size, cfg.hidden_size))
        self.position = nn.Embedding(cfg.seq_len, cfg.hidden_size) if cfg.position == "learned" else None

    def forward(self, ids: Tensor) -> Tensor:
        x = self.word(ids)
        if self.position is not None:
            x = x + self.position(paddle.arange(ids.shape[1]).unsqueeze(0))
        if self.cfg.sequence_parallel:  # [b, s, h] -> this rank's [s/tp, b, h]; backward all-gathers
            from paddle.distributed.fleet.utils.sequence_parallel_utils import ScatterOp
            x = ScatterOp.apply(x.transpose([1, 0, 2]))
        return x


class Head(nn.Layer):
    """Final norm and the logits (this rank's vocabulary shard when tp > 1)."""

    def __init__(self, cfg: Cfg) -> None:
        super().__init__()
        self.sequence_parallel = cfg.sequence_parallel
        self.norm = _norm(cfg)
        self.logits = _column(cfg, cfg.hidden_size, cfg.vocab_size) if cfg.tp > 1 else \
            nn.Linear(cfg.hidden_size, cfg.vocab_size, bias_attr=False)

    def forward(self, x: Tensor) -> Tensor:
        logits = self.logits(self.norm(x))  # with SP the column linear gathered s: [s, b, vocab/tp]
        return logits.transpose([1, 0, 2]) if self.sequence_parallel else logits


class LanguageModelLoss(nn.Layer):
    def __init__(self, cfg: Cfg) -> None:
        super().__init__()
        self.parallel = fleet.meta_parallel.ParallelCrossEntropy() if cfg.tp > 1 else None

    def forward(self, logits: Tensor, labels: Tensor) -> Tensor:
        if self.parallel is not None:
            return self.parallel(logits, labels.unsqueeze(-1)).mean()
        return F.cross_entropy(logits.reshape([-1, logits.shape[-1]]), labels.reshape([-1, 1]))


class GPT(nn.Layer):
    def __init__(self, cfg: Cfg) -> None:
        super().__init__()
        self.embed, self.head = Embed(cfg), Head(cfg)
        self.blocks = nn.LayerList([Block(cfg, i) for i in range(cfg.num_layers)])

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def sequence_parallel_names(model: nn.Layer) -> list[str]:
    """Names of the parameters whose gradient is partial on each TP rank under SP because their
    layer runs on the rank's s/tp positions only and holds the whole parameter: the norms' weights
    and biases (the row linears' biases are the other such, and Paddle marks those itself)."""
    return [f"{prefix}.{name}" for prefix, layer in model.named_sublayers()
            if isinstance(layer, (nn.LayerNorm, RMSNorm))
            for name, _ in layer.named_parameters(include_sublayers=False)]


def mark_sequence_parallel(model: nn.Layer) -> None:
    """Mark the norms' parameters for Paddle's sequence-parallel all-reduce hooks (hybrid.prepare)."""
    from paddle.distributed.fleet.utils.sequence_parallel_utils import mark_as_sequence_parallel_parameter
    params = dict(model.named_parameters())
    for name in sequence_parallel_names(model):
        mark_as_sequence_parallel_parameter(params[name])


def build(cfg: Cfg) -> nn.Layer:
    """The model: GPT, or with pp > 1 a PipelineLayer of the same layers (its loss inside)."""
    if cfg.pp == 1:
        model = GPT(cfg)
    else:
        from paddle.distributed.fleet.meta_parallel import LayerDesc, PipelineLayer
        blocks = [LayerDesc(Block, cfg, i) for i in range(cfg.num_layers)]
        descs = [LayerDesc(Embed, cfg)] + blocks + [LayerDesc(Head, cfg)]
        model = PipelineLayer(layers=descs, num_stages=cfg.pp, loss_fn=LanguageModelLoss(cfg), seg_method="layer:Block")
    if cfg.sequence_parallel:
        mark_sequence_parallel(model)
    return model
