"""Gradient-communication methods for the collective benchmarks (owned by the methods work, issue 3).

The loop calls three functions: check(cfg) before anything runs, strategy(cfg) for fleet.init,
and prepare(cfg, work, ctx) -> (model, step_fn) where step_fn(batch) runs one optimizer step and
returns the loss.

This first version implements Paddle's default data parallelism only (overlapped all-reduce in
25 MB buckets); the method work replaces it with the full set.
"""
import paddle
from paddle.distributed import fleet

METHODS = ("mgwfbp",)


def check(cfg) -> None:
    from fleetbench.config import ConfigError

    if cfg.method not in METHODS:
        raise ConfigError(f"config key 'method' must be one of {', '.join(METHODS)} (got {cfg.method!r})")


def strategy(cfg):
    strategy = fleet.DistributedStrategy()
    strategy.fuse_grad_size_in_MB = cfg.comm_buffer_mb
    return strategy


def prepare(cfg, work, ctx):
    model, optimizer = work.model, work.optimizer
    if ctx.world_size > 1:
        model = fleet.distributed_model(model)
        optimizer = fleet.distributed_optimizer(optimizer)

    def step_fn(batch):
        loss = work.loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        return loss

    return model, step_fn
