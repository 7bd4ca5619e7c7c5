"""Model FLOPs and MFU: pure arithmetic (no Paddle), one convention (docs/reference/metrics.md#mfu).

MFU (model FLOPs utilisation, PaLM's Appendix B) is the model's training FLOPs per second over
the peak the devices could do: what the model needs, not what the kernels ran (no recomputation,
no padding, no optimizer), so it compares across implementations.

Training FLOPs per sample = forward multiply-accumulates (MACs) per sample x 2 (a MAC is a multiply
and an add) x 3 (backward costs twice the forward: the gradients of the inputs and of the weights).
Forward MACs count what dominates: convolutions, fully connected layers and attention's two batched
products; normalisation, activations, pooling, embeddings' lookups and the loss are left out (a
percent or less of a ResNet's or a Transformer's). ResNet-50 at 224x224 is 4.09 GMAC forward by
this count, the figure its papers and torchvision cite as ~4.1 G.

Peak: a GPU's from the one accelerator table (measure/devices.py) at the precision the run used;
a CPU's has no datasheet worth trusting (turbo, AVX clocks, shared cores), so it is measured: the
GEMM rate (fp32 matmul, the diagnose probe's) each rank reaches on its own threads, all ranks at once.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from fleetbench.measure import devices

CONVENTION = ("training FLOPs per sample = forward multiply-accumulates of convolutions, fully connected "
              "layers and attention products x 2 (multiply and add) x 3 (forward + backward of inputs "
              "and weights); peak: devices.py's dense peak at the run's precision (GPU) or the GEMM "
              "rate measured on each rank's threads (CPU), summed over ranks")
MACS_TO_TRAINING_FLOPS = 2 * 3


def conv_macs(output_numel: int, weight_shape: Sequence[int]) -> float:
    """A convolution's MACs: every output element sums in_channels/groups x kernel products
    (Paddle's weight is [out_channels, in_channels / groups, *kernel])."""
    return float(output_numel) * math.prod(weight_shape[1:])


def linear_macs(output_numel: int, weight_shape: Sequence[int]) -> float:
    """A fully connected layer's MACs (Paddle's weight is [in_features, out_features])."""
    return float(output_numel) * weight_shape[0]


def attention_macs(batch: int, query_len: int, key_len: int, embed_dim: int) -> float:
    """Attention's two batched products, Q K^T and (softmax) V, over all heads: 2 x B x Lq x Lk x E
    (the projections are linear layers, counted as such)."""
    return 2.0 * batch * query_len * key_len * embed_dim


def transformer_forward_macs(layers: int, hidden: int, seq_len: int) -> float:
    """A Transformer encoder's forward MACs a sequence, as the layer count gives them: per layer
    and token the Q, K, V and output projections (4 h^2) and the 4h feed-forward (8 h^2), plus
    attention's two products (2 L h a token); embeddings and the output head left out."""
    return float(layers) * (12 * hidden * hidden * seq_len + 2 * seq_len * seq_len * hidden)


# Published networks' forward MACs a sample, for records that carry no count of their own (a
# published table's): config -> MACs. ResNet-50 at 224x224 as counted here (4.09 G; 4.1 G in its
# paper); image_size scales it by area (exact at multiples of 32). BERT by its layers and width.
PUBLISHED_FORWARD_MACS = {
    "ResNet-50": lambda config: 4.089e9 * (float(config.get("image_size") or 224) / 224) ** 2,
    "BERT-Large": lambda config: transformer_forward_macs(24, 1024, int(config.get("seq_len") or 128)),
    "BERT-Base": lambda config: transformer_forward_macs(12, 768, int(config.get("seq_len") or 128)),
}


def training_flops(forward_macs: float) -> float:
    return forward_macs * MACS_TO_TRAINING_FLOPS


def gpu_precision(amp: str, device_name: str | None) -> str:
    """The precision whose peak a run is held to: AMP's half type, else TF32 where the GPU has it
    (Paddle lets cuBLAS and cuDNN use TF32 for fp32 by default: FLAGS_allow_tf32_cublas and
    FLAGS_allow_tf32_cudnn), else fp32."""
    if amp in ("fp16", "bf16"):
        return amp
    device = devices.lookup(device_name)
    return "tf32" if device is not None and "tf32" in device.tflops else "fp32"


def gpu_peak_flops(device_name: str | None, precision: str, count: int) -> float | None:
    """The peak FLOP/s of `count` GPUs of this name at `precision`; None for a GPU the table lacks."""
    one = devices.peak_flops(device_name, precision)
    return None if one is None else one * count


def cpu_peak_flops(gemm_gflops_by_rank: Sequence[float]) -> float | None:
    """The CPU ranks' peak FLOP/s: the sum of the GEMM GFLOP/s each measured on its own threads
    while the others measured theirs (so ranks sharing cores share them here too)."""
    rates = [float(r) for r in gemm_gflops_by_rank]
    if not rates or any(not math.isfinite(r) or r <= 0 for r in rates):
        return None
    return sum(rates) * 1e9


def mfu(flops_per_sample: float | None, samples_per_s: float | None, peak: float | None) -> float | None:
    """Model FLOPs per second over the peak; None where a figure is missing."""
    if not flops_per_sample or samples_per_s is None or not peak:
        return None
    return flops_per_sample * samples_per_s / peak


# ---------------------------------------------------------------- decoder-only transformers, per token
# FLOPs of training a decoder-only transformer (GPT, LLaMA), per token: one definition for the GPT
# benchmark's MFU, `fleetbench plan` and the conversion of published tables. Pure arithmetic.
#
# Convention (Narayanan et al., SC'21, "Efficient Large-Scale Language Model Training on GPU Clusters
# Using Megatron-LM", section 5.1; Korthikanti et al. 2022 appendix): only matrix multiplications are
# counted, 2 FLOPs a multiply-add; backward is twice forward. A layer's forward, a token at sequence
# length s, hidden h, feed-forward width f:
#
#     attention projections   2 * 4h^2            (QKV and output)
#     attention scores        2 * 2sh             (QK^T and attention x V, the whole s x s square:
#                                                  causal masking and flash attention's skipped half
#                                                  are counted anyway, as both papers do)
#     MLP                     2 * 2hf             (GELU: up and down; f = 4h gives 16h^2)
#                             2 * 3hf             (SwiGLU: gate, up and down)
#     logits (once a model)   2hV
#
# So with f = 4h an iteration of B sequences of s tokens costs 72 B s l h^2 (1 + s/6h + V/12lh),
# Narayanan's formula without recomputation. Full recomputation runs every layer's forward again (not the logits):
# 96 B s l h^2 (1 + s/6h + V/16lh), the formula Narayanan's Table 1 reports its TFLOP/s with.
#
# Which to call MFU: `model` FLOPs (3 passes, no recomputation) are what MFU counts (Chowdhery et al.
# 2022; Korthikanti Table 5), because recomputation is work the hardware does, not work the model
# needs; `hardware` FLOPs (with the recomputed forward) give HFU and are what Megatron's Table 1
# printed. `gpt_train_flops_per_token(recompute=...)` returns either: recompute="none" is the model
# FLOPs; "full" adds a layer forward; "selective" adds the attention-score forward only
# (Korthikanti: QK^T, softmax, attention x V are what selective recomputation recomputes).

#
# Grouped-query attention (num_kv_heads K/V heads of num_heads): the K and V projections are
# kv_share = num_kv_heads / num_heads of the query's, so the projections are 2 (2 + 2 kv_share) h^2;
# the scores are unchanged (every query head still attends over the whole sequence).
# Mixture-of-experts (Fedus et al. 2021, Switch; Jiang et al. 2024, Mixtral): a token runs through its
# top_k experts only, so an MoE layer's MLP counts top_k experts' FLOPs (the active parameters, not
# the num_experts held) plus the router's 2 h E; tokens a capacity limit drops are counted anyway.
# An MoE layer's experts may be narrower than the dense MLP (MoeShape.ffn) and `shared` experts run
# on every token beside the routed ones (DeepSeek): the layer's MLP is then (top_k + shared) expert
# MLPs of that width in place of the dense one.
# Attention wider or narrower than the hidden size (heads x head_dim != hidden: Qwen3, GPT-OSS):
# `attention_width` = heads x head_dim is the width Q, the scores and the output projection run
# at, the K/V projections at kv_share of it.

RECOMPUTE = ("none", "selective", "full")


@dataclasses.dataclass(frozen=True)
class MoeShape:
    """The experts of a mixture-of-experts model: num_experts MLPs in each of `layers` layers,
    each token routed to top_k of them."""
    num_experts: int
    top_k: int
    layers: int
    ffn: int | None = None  # an expert's MLP width (None: the dense MLP's)
    shared: int = 0         # shared experts every token runs through beside its top_k


def layer_forward_flops(hidden: int, seq: int, ffn: int | None = None, gated: bool = False, *,
                        kv_share: float = 1.0, attention_width: int | None = None) -> tuple:
    """(matrix FLOPs, attention-score FLOPs) of one dense layer's forward, a token."""
    f = ffn or 4 * hidden
    mlp = 2 * (3 if gated else 2) * hidden * f
    if attention_width is None:
        return 2 * (2 + 2 * kv_share) * hidden * hidden + mlp, 2 * 2 * seq * hidden
    projections = 2 * (2 + 2 * kv_share) * hidden * attention_width
    return projections + mlp, 2 * 2 * seq * attention_width


def moe_extra_flops(hidden: int, ffn: int | None, gated: bool, moe: MoeShape | None) -> float:
    """What MoE layers add a token's forward over dense ones: top_k + shared expert MLPs in place of
    the dense one, and the router."""
    if moe is None or not moe.layers:
        return 0.0
    mlp = 2 * (3 if gated else 2) * hidden * (ffn or 4 * hidden)
    expert = 2 * (3 if gated else 2) * hidden * (moe.ffn or ffn or 4 * hidden)
    return float(moe.layers * ((moe.top_k + moe.shared) * expert - mlp + 2 * hidden * moe.num_experts))


def gpt_train_flops_per_token(layers: int, hidden: int, seq: int, vocab: int, ffn: int | None = None,
                              gated: bool = False, recompute: str = "none", *, kv_share: float = 1.0,
                              moe: MoeShape | None = None, attention_width: int | None = None) -> float:
    """Training FLOPs (forward + backward, + the recomputed forward) a token (module doc)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute {recompute!r}: expected one of {', '.join(RECOMPUTE)}")
    dense, scores = layer_forward_flops(hidden, seq, ffn, gated, kv_share=kv_share, attention_width=attention_width)
    layer_work = layers * (dense + scores) + moe_extra_flops(hidden, ffn, gated, moe)
    logits = 2 * hidden * vocab
    total = 3 * (layer_work + logits)
    if recompute == "full":
        total += layer_work
    elif recompute == "selective":
        total += layers * scores
    return float(total)


def gpt_parameters(layers: int, hidden: int, vocab: int, ffn: int | None = None, gated: bool = False,
                   seq: int = 0, *, kv_share: float = 1.0, experts: int = 1, moe_layers: int = 0,
                   attention_width: int | None = None, moe_ffn: int | None = None, shared: int = 0) -> float:
    """Parameters: layers (attention's (2 + 2 kv_share) h^2, h x attention_width if given, + the MLP's
    matrices, `experts` (+ `shared`) of them of width moe_ffn and a router in `moe_layers` of the
    layers, + norms and biases), the embedding (tied with the logits), `seq` learned positions (0:
    rotary, none). Active parameters: experts = top_k, router aside."""
    f = ffn or 4 * hidden
    mlp = (3 if gated else 2) * hidden * f
    attention = (2 + 2 * kv_share) * hidden * (hidden if attention_width is None else attention_width)
    per_layer = attention + mlp + 9 * hidden
    expert = (3 if gated else 2) * hidden * (moe_ffn or f)
    moe = moe_layers * ((experts + shared) * expert - mlp + hidden * experts) if moe_layers else 0
    return float(layers * per_layer + moe + vocab * hidden + seq * hidden + 2 * hidden)


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int, recompute: bool) -> float:
    """Narayanan et al.'s closed form an iteration (f = 4h, GELU): 96 (with full recomputation) or
    72 B s l h^2 (1 + s/6h + V/(16 or 12) l h); equal to `gpt_train_flops_per_token` x B s."""
    lead, vshare = (96, 16) if recompute else (72, 12)
    return lead * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (vshare * layers * hidden))
