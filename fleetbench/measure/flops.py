"""FLOPs of training a decoder-only transformer (GPT, LLaMA), per token: one definition for the GPT
benchmark's MFU, `fleetbench plan` and the conversion of published tables. Pure arithmetic.

Convention (Narayanan et al., SC'21, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", section 5.1; Korthikanti et al. 2022 appendix): only matrix multiplications are
counted, 2 FLOPs a multiply-add; backward is twice forward. A layer's forward, a token at sequence
length s, hidden h, feed-forward width f:

    attention projections   2 * 4h^2            (QKV and output)
    attention scores        2 * 2sh             (QK^T and attention x V, the whole s x s square:
                                                 causal masking and flash attention's skipped half
                                                 are counted anyway, as both papers do)
    MLP                     2 * 2hf             (GELU: up and down; f = 4h gives 16h^2)
                            2 * 3hf             (SwiGLU: gate, up and down)
    logits (once a model)   2hV

So with f = 4h an iteration of B sequences of s tokens costs 72 B s l h^2 (1 + s/6h + V/12lh),
Narayanan's formula without recomputation. Full recomputation runs every layer's forward again (not the logits):
96 B s l h^2 (1 + s/6h + V/16lh), the formula Narayanan's Table 1 reports its TFLOP/s with.

Which to call MFU: `model` FLOPs (3 passes, no recomputation) are what MFU counts (Chowdhery et al.
2022; Korthikanti Table 5), because recomputation is work the hardware does, not work the model
needs; `hardware` FLOPs (with the recomputed forward) give HFU and are what Megatron's Table 1
printed. `gpt_train_flops_per_token(recompute=...)` returns either: recompute="none" is the model
FLOPs; "full" adds a layer forward; "selective" adds the attention-score forward only
(Korthikanti: QK^T, softmax, attention x V are what selective recomputation recomputes).
"""
from __future__ import annotations

RECOMPUTE = ("none", "selective", "full")


def layer_forward_flops(hidden: int, seq: int, ffn: int | None = None, gated: bool = False) -> tuple:
    """(matrix FLOPs, attention-score FLOPs) of one layer's forward, a token."""
    f = ffn or 4 * hidden
    projections = 2 * 4 * hidden * hidden
    mlp = 2 * (3 if gated else 2) * hidden * f
    return projections + mlp, 2 * 2 * seq * hidden


def gpt_train_flops_per_token(layers: int, hidden: int, seq: int, vocab: int, ffn: int | None = None,
                              gated: bool = False, recompute: str = "none") -> float:
    """Training FLOPs (forward + backward, + the recomputed forward) a token (module doc)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute {recompute!r}: expected one of {', '.join(RECOMPUTE)}")
    dense, scores = layer_forward_flops(hidden, seq, ffn, gated)
    logits = 2 * hidden * vocab
    total = 3 * (layers * (dense + scores) + logits)
    if recompute == "full":
        total += layers * (dense + scores)
    elif recompute == "selective":
        total += layers * scores
    return float(total)


def gpt_parameters(layers: int, hidden: int, vocab: int, ffn: int | None = None, gated: bool = False,
                   seq: int = 0) -> float:
    """Parameters: layers (4h^2 attention + the MLP's matrices + norms and biases), the embedding
    (tied with the logits), `seq` learned positions (0: rotary, none)."""
    f = ffn or 4 * hidden
    per_layer = 4 * hidden * hidden + (3 if gated else 2) * hidden * f + 9 * hidden
    return float(layers * per_layer + vocab * hidden + seq * hidden + 2 * hidden)


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int, recompute: bool) -> float:
    """Narayanan et al.'s closed form an iteration (f = 4h, GELU): 96 (with full recomputation) or
    72 B s l h^2 (1 + s/6h + V/(16 or 12) l h); equal to `gpt_train_flops_per_token` x B s."""
    lead, vshare = (96, 16) if recompute else (72, 12)
    return lead * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (vshare * layers * hidden))
