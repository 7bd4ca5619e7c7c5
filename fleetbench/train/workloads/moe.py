"""Mixture-of-experts MLPs for the GPT benchmark (gpt_model.Block): a router and num_experts expert
MLPs, each token sent to its top_k experts and their outputs summed by the router's weights.

Experts local to the rank (ep = 1): a small layer of our own, because Paddle's
paddle.incubate.distributed.models.moe.MoELayer does not run on a CPU build, even with its experts
local (moe_group None): its dispatch counts tokens per expert with the number_count operator, which
has no CPU kernel in 2.6.2 or 3.3.1 ("Do not support expert count op for cpu kernel now",
phi/kernels/cpu/number_count_kernel.cc). Ours routes as Switch (Fedus et al. 2021) and GShard
(Lepikhin et al. 2020) define it: a linear router, softmax, top-k, the k weights renormalised to sum
to 1 (Mixtral's), an expert capacity of capacity_factor x tokens x top_k / num_experts slots (tokens
beyond it are dropped by that expert, first come first served; capacity_factor 0: none dropped), and
the auxiliary load-balancing loss num_experts x sum_e f_e P_e (f_e: the share of the top-k
assignments expert e got, P_e: its mean router probability) added to the training loss with weight
aux_loss_coef, not to the reported loss.

Experts across ranks (ep > 1, GPU builds only: gloo has no all-to-all, train/hybrid.check): Paddle's
MoELayer with num_experts / ep experts on each rank and the data-parallel group as its moe_group
(its global_scatter / global_gather are the all-to-all), gated by Paddle's own gates (gshard for
top-2, switch for top-1, naive otherwise) with their capacity and loss. Untested in kernels here.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import paddle
import paddle.nn.functional as F
from paddle import nn
from paddle.autograd import PyLayer

Cfg = Any  # collective/gpt.GptConfig
Tensor = paddle.Tensor


class AddAuxiliaryLoss(PyLayer):
    """x unchanged forward; backward also sends a gradient of 1 into `loss`, so the loss trains the
    router without appearing in the model's output (works under the pipeline's schedule too)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, loss: Tensor) -> Tensor:
        ctx.shape, ctx.dtype = loss.shape, loss.dtype
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        return grad, paddle.ones(ctx.shape, ctx.dtype)


def capacity(cfg: Cfg, tokens: int) -> int:
    """Slots an expert has for `tokens` tokens (0: unlimited)."""
    if not cfg.capacity_factor:
        return 0
    return max(1, math.ceil(cfg.capacity_factor * tokens * cfg.top_k / cfg.num_experts))


def balance_loss(probs: Tensor, index: Tensor, num_experts: int) -> Tensor:
    """Switch's auxiliary loss over the top-k assignments: E x sum_e f_e P_e (1 when balanced)."""
    share = F.one_hot(index.reshape([-1]), num_experts).mean(0)  # f_e: no gradient flows through it
    return num_experts * (share.detach() * probs.mean(0)).sum()


class LocalExperts(nn.Layer):
    """Router + num_experts experts, all on this rank (module doc)."""

    def __init__(self, cfg: Cfg, expert: Callable[[], nn.Layer]) -> None:
        super().__init__()
        self.cfg = cfg
        self.router = nn.Linear(cfg.hidden_size, cfg.num_experts, bias_attr=False)
        self.experts = nn.LayerList([expert() for _ in range(cfg.num_experts)])

    def forward(self, x: Tensor) -> Tensor:
        shape, k = x.shape, self.cfg.top_k
        tokens = x.reshape([-1, shape[-1]])
        probs = F.softmax(self.router(tokens).astype("float32"), axis=-1)  # [T, E]
        weights, index = paddle.topk(probs, k, axis=-1)  # [T, k]
        weights = (weights / weights.sum(-1, keepdim=True)).astype(x.dtype).reshape([-1])  # slot t*k + j
        flat, limit = index.reshape([-1]), capacity(self.cfg, tokens.shape[0])
        out = paddle.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            slots = paddle.nonzero(flat == e).reshape([-1])
            if limit:
                slots = slots[:limit]
            if slots.shape[0] == 0:
                continue
            rows = slots // k
            y = expert(paddle.gather(tokens, rows)) * paddle.gather(weights, slots).unsqueeze(-1)
            out = paddle.scatter_nd_add(out, rows.unsqueeze(-1), y)  # index_add's backward fails on a constant `out`
        out = out.reshape(shape)
        if not self.training or not self.cfg.aux_loss_coef:
            return out
        return AddAuxiliaryLoss.apply(out, self.cfg.aux_loss_coef * balance_loss(probs, index, self.cfg.num_experts))


class PaddleExperts(nn.Layer):
    """Paddle's MoELayer over the data-parallel group: num_experts / ep experts here, their
    parameters marked no_sync (Paddle's DataParallel leaves "moe's expert parameters" unreduced:
    each rank's are its own), the gate's loss added as ours is (module doc)."""

    def __init__(self, cfg: Cfg, expert: Callable[[], nn.Layer]) -> None:
        super().__init__()
        from paddle.distributed import fleet
        from paddle.incubate.distributed.models.moe import MoELayer

        self.cfg = cfg
        gate = "gshard" if cfg.top_k == 2 else "switch" if cfg.top_k == 1 else "naive"
        group = fleet.get_hybrid_communicate_group().get_data_parallel_group()
        experts = nn.LayerList([expert() for _ in range(cfg.num_experts // cfg.ep)])
        for param in experts.parameters():
            param.no_sync = True
        self.layer = MoELayer(d_model=cfg.hidden_size, experts=experts, gate={"type": gate, "top_k": cfg.top_k},
                              moe_group=group)

    def forward(self, x: Tensor) -> Tensor:
        out = self.layer(x)
        loss = self.layer.gate.get_loss() if hasattr(self.layer.gate, "get_loss") else None
        if not self.training or not self.cfg.aux_loss_coef or loss is None:
            return out
        return AddAuxiliaryLoss.apply(out, self.cfg.aux_loss_coef * loss)


def build(cfg: Cfg, expert: Callable[[], nn.Layer]) -> nn.Layer:
    return PaddleExperts(cfg, expert) if cfg.ep > 1 else LocalExperts(cfg, expert)
