"""Fleet's hybrid parallelism for the GPT benchmark: the strategy (dp / mp / pp / sharding degrees),
what the installed Paddle can run (refused before launch), the groups Paddle will make (dry
topology), the wrapped model and its step, and the record's utilization (MFU).

    degrees      the data-parallel width W = world / (tp x pp) is `dp_degree` (sharding stage 0, and
                 stages 2-3, which shard over the data-parallel group with
                 paddle.distributed.sharding.group_sharded_parallel), or `sharding_degree` (stage 1:
                 Fleet's DygraphShardingOptimizer, dp_degree 1)
    check        a CPU build (or CPU ranks) cannot run tp, pp, sequence parallelism or stages 2-3
                 (Paddle 2.6.2 and 3.3.1: ColumnParallelLinear "Only support xpu, gpu and
                 custom_device"; PipelineLayer fails in ParallelEnv; group_sharded_parallel is a GPU
                 path): one line naming the build, exit 2, before anything starts
    dry topology  `--set dry_topology=true`: each rank prints `FLEETBENCH_TOPOLOGY {json}`: its
                 device and endpoint (its node), the degrees and the ranks of each of its groups,
                 computed by Paddle's own CommunicateTopology in the order of the strategy's
                 hybrid_parallel_order (what fleet.init builds its groups from), with
                 sequence_parallel the [s/tp, b, h] shape of the activations between the TP
                 layers (sequence_layout), and ends before
                 fleet.init: no process group is made (gloo cannot make Paddle's hybrid subgroups
                 on CPU), no kernel runs
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

from fleetbench.machine.device import gpu_ranks
from fleetbench.measure import flops
from fleetbench.measure.config import ConfigError
from fleetbench.train import capability

Cfg = Any  # collective/gpt.GptConfig: the keys read here are its split (tp, pp, sharding_stage, ...)

GPU_ONLY = ("tp", "pp", "sep", "sequence_parallel", "sharding_stage")
AXES = {"dp": "data", "pp": "pipe", "sharding": "sharding", "mp": "model", "sep": "sep", "cp": "context",
        "ep": "expert", "moe_sharding": "moe_sharding"}


def width(cfg: Cfg, world: int) -> int:
    return max(1, world // (cfg.tp * cfg.pp * cfg.sep))


def degrees(cfg: Cfg, world: int) -> dict:
    w = width(cfg, world)
    stage1 = cfg.sharding_stage == 1
    out = {"dp_degree": 1 if stage1 else w, "mp_degree": cfg.tp, "pp_degree": cfg.pp,
           "sharding_degree": w if stage1 else 1}
    return dict(out, sep_degree=cfg.sep) if cfg.sep > 1 else out


def check_experts(cfg: Cfg, world: int) -> None:
    """Expert parallelism splits the experts over the data-parallel group (Paddle's MoELayer's
    moe_group): ep must be that group's width."""
    if cfg.ep > 1 and cfg.ep != width(cfg, world):
        raise ConfigError(f"config key 'ep' ({cfg.ep}) must equal the data-parallel width world / (tp x pp x sep) "
                          f"= {width(cfg, world)}: the experts are split over the data-parallel group")


def strategy(cfg: Cfg) -> Any:
    from paddle.distributed import fleet

    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    s = fleet.DistributedStrategy()
    s.hybrid_configs = dict(degrees(cfg, world), pp_configs={
        "micro_batch_size": cfg.micro_batch, "accumulate_steps": accumulation(cfg, world)})
    return s


def accumulation(cfg: Cfg, world: int) -> int:
    """Micro-batches a pipeline runs a step (1 without a pipeline: global = micro x width)."""
    return max(1, cfg.global_batch // (cfg.micro_batch * width(cfg, world))) if cfg.global_batch else 1


def check(cfg: Cfg) -> None:
    """ConfigError (one line) when this Paddle build and these ranks cannot run the split."""
    if cfg.dry_topology:
        return  # no kernel, no process group: orchestration only
    if cfg.ep > 1 and not gpu_ranks():
        raise ConfigError(
            f"config key 'ep' is {cfg.ep} but {capability.paddle_build()} runs CPU ranks over gloo, which has no "
            "all-to-all (expert parallelism's dispatch and combine): use a CUDA build of paddlepaddle-gpu 2.6.2 or "
            "3.3.1 with NCCL where GPUs are visible, or ep=1 here (every rank holds all the experts)")
    if cfg.ep > 1 and cfg.sharding_stage:
        raise ConfigError(f"config key 'ep' ({cfg.ep}) needs sharding_stage 0: the experts are split over the "
                          f"data-parallel group (got sharding_stage {cfg.sharding_stage})")
    asked = [k for k in GPU_ONLY if (getattr(cfg, k) > (1 if k in ("tp", "pp", "sep") else 0)
                                     if k != "sequence_parallel" else getattr(cfg, k))]
    asked = [k for k in asked if k != "sharding_stage" or cfg.sharding_stage >= 2]
    if asked and not gpu_ranks():
        # sequence parallelism needs tp > 1 too: name the key the user asked for, not its prerequisite
        key = "sequence_parallel" if "sequence_parallel" in asked else asked[0]
        raise ConfigError(
            f"config key '{key}' is {getattr(cfg, key)!r} but {capability.paddle_build()} runs CPU ranks: tensor/"
            "pipeline/segment/sequence parallelism and sharding stages 2-3 run on GPU builds only "
            "(ColumnParallelLinear: "
            "'Only support xpu, gpu and custom_device'); use a CUDA build of paddlepaddle-gpu 2.6.2 or 3.3.1 "
            "where GPUs are visible, or tp=pp=sep=1, sequence_parallel=false, sharding_stage 0 or 1 here")


def sequence_layout(seq_len: int, micro_batch: int, hidden: int, tp: int) -> list[int]:
    """[s/tp, b, h]: a TP rank's share of the activations between the TP layers under sequence
    parallelism. The embedding's [b, s, h] is turned sequence-first so each rank's cut of s is
    contiguous, then cut along s into tp pieces (Paddle's ScatterOp / ReduceScatterOp assert that
    s divides; refused here in one line instead, before launch)."""
    if tp < 1 or seq_len % tp:
        raise ConfigError(f"config key 'seq_len' must be a multiple of tp ({tp}) with sequence_parallel=true: "
                          f"each TP rank holds seq_len / tp positions (got {seq_len})")
    return [seq_len // tp, micro_batch, hidden]


def topology(cfg: Cfg, world: int, rank: int) -> dict:
    """This rank's place in the hybrid topology Paddle builds for `cfg` (module doc)."""
    from paddle.distributed.fleet.base.topology import CommunicateTopology

    s = strategy(cfg)
    configs = s.hybrid_configs
    order = list(s.hybrid_parallel_order)
    dims = [max(1, int(configs.get(f"{axis}_degree", 1))) for axis in order]
    names = [AXES.get(axis, axis) for axis in order]
    topo = CommunicateTopology(hybrid_group_names=names, dims=dims)
    groups = {name: next(g for g in topo.get_comm_list(name) if rank in g) for name in names}
    if cfg.ep > 1:  # Paddle's MoELayer's moe_group (workloads/moe.py): the data-parallel group
        groups["expert"] = groups["data"]
    return {"rank": rank, "world_size": world, "order": order, "degrees": dict(zip(order, dims)),
            "groups": groups, "coord": dict(topo.get_coord(rank)._asdict()),
            "device": os.environ.get("FLAGS_selected_gpus"), "local_rank": os.environ.get("PADDLE_LOCAL_RANK"),
            # which node: the address Paddle's launcher gave this rank (its node's --host), of how many
            "endpoint": os.environ.get("PADDLE_CURRENT_ENDPOINT"), "nnodes": os.environ.get("PADDLE_NNODES"),
            "sharding_stage": cfg.sharding_stage, "sequence_parallel": cfg.sequence_parallel, "ep": cfg.ep,
            "num_experts": cfg.num_experts, "num_kv_heads": cfg.num_kv_heads or cfg.num_heads,
            "sequence_layout": (sequence_layout(cfg.seq_len, cfg.micro_batch, cfg.hidden_size, cfg.tp)
                                if cfg.sequence_parallel else None), "recompute": cfg.recompute}


def print_topology(cfg: Cfg) -> bool:
    """With dry_topology: print this rank's topology line and say the run ends here."""
    if not cfg.dry_topology:
        return False
    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    if world % (cfg.tp * cfg.pp * cfg.sep):
        raise ConfigError(f"config key 'tp' x 'pp' x 'sep' ({cfg.tp * cfg.pp * cfg.sep}) must divide the job's "
                          f"{world} ranks")
    check_experts(cfg, world)
    print("FLEETBENCH_TOPOLOGY " + json.dumps(topology(cfg, world, rank)), flush=True)
    return True


def moe_shape(cfg: Cfg) -> flops.MoeShape | None:
    """The experts the FLOPs count (top_k of num_experts a token: the active ones), None when dense."""
    if not cfg.num_experts:
        return None
    return flops.MoeShape(cfg.num_experts, cfg.top_k, cfg.num_layers // cfg.moe_every)


def utilization(cfg: Cfg) -> Callable[[dict], dict]:
    """The record's FLOPs figures from the GPT formula (measure/flops.py, model FLOPs: attention's
    products counted, no recomputation), in place of the layer-hook count of train/trace.py (which
    misses the attention products a custom layer computes with paddle.matmul); MFU against the one
    peak every benchmark is held to (train/trace.model_flops: devices.py on a GPU, the GEMM the
    ranks measure on a CPU), so one MFU definition for every benchmark. Grouped-query attention's
    smaller K/V projections are counted as they are; of a mixture of experts only the top_k experts
    a token runs (its active parameters), and the router."""
    per_token = flops.gpt_train_flops_per_token(cfg.num_layers, cfg.hidden_size, cfg.seq_len, cfg.vocab_size,
                                                cfg.ffn_hidden or None, cfg.mlp == "swiglu",
                                                kv_share=(cfg.num_kv_heads or cfg.num_heads) / cfg.num_heads,
                                                moe=moe_shape(cfg))

    def figures(standard: dict) -> dict:
        per_sample = per_token * cfg.seq_len
        return {"flops_per_token": per_token, "model_flops_per_sample": per_sample,
                "model_tflops_per_device": per_token * standard["throughput_per_device"] / 1e12,
                "mfu": flops.mfu(per_sample, standard.get("samples_per_s"), standard.get("peak_flops"))}
    return figures


def prepare(cfg: Cfg, work: Any, ctx: Any) -> tuple:
    """(model, step_fn) of the split: Fleet's wrappers (DataParallel, ShardingParallel + the
    sharding optimizer, TensorParallel, PipelineParallel) or group_sharded_parallel for stages
    2-3 over the data-parallel group; the step is the loop's (methods.Steps: AMP, the optimizer,
    the learning-rate schedule), or the pipeline's train_batch."""
    import paddle
    from paddle.distributed import fleet

    from fleetbench.train import methods
    from fleetbench.train.amp import Precision

    if cfg.sequence_parallel and ctx.world_size > 1:
        from paddle.distributed.fleet.utils import sequence_parallel_utils as spu
        # the parameters marked sequence-parallel (the norms', gpt_model.mark_sequence_parallel, and
        # the row linears' biases, which Paddle marks) get a partial gradient on each TP rank: the
        # hooks sum them over the TP group once a step, after the last micro-batch; unfused, as
        # PaddleNLP's default. On the model before AMP's decoration, as PaddleNLP's trainer does.
        spu.register_sequence_parallel_allreduce_hooks(work.model, accumulation(cfg, ctx.world_size), False)
    amp = ctx.precision = Precision(cfg.amp, cfg.amp_level)
    work.model, work.optimizer = amp.decorate(work.model, work.optimizer)
    model, optimizer = work.model, work.optimizer
    if ctx.world_size > 1 and cfg.sharding_stage >= 2:
        from paddle.distributed.sharding import group_sharded_parallel
        group = fleet.get_hybrid_communicate_group().get_data_parallel_group()
        model, optimizer, _ = group_sharded_parallel(model, optimizer, "os_g" if cfg.sharding_stage == 2 else "p_g_os",
                                                     group=group)
    elif ctx.world_size > 1:
        params = [p for p in model.parameters() if not p.stop_gradient]
        ctx.phases.watch_before(params)  # as methods.prepare: the time inside Fleet's reducer (train/phases.py)
        model, optimizer = fleet.distributed_model(model), fleet.distributed_optimizer(optimizer)
        ctx.phases.watch_after(params)
    params = [p for p in work.model.parameters() if not p.stop_gradient]
    ctx.comm = dict(methods.comm_plan(cfg, model, params), parallel=dict(
        degrees(cfg, ctx.world_size), sharding_stage=cfg.sharding_stage, sequence_parallel=cfg.sequence_parallel,
        recompute=cfg.recompute, accumulate_steps=accumulation(cfg, ctx.world_size)))
    if not isinstance(model, paddle.DataParallel) and ctx.world_size > 1:
        # sharding: each gradient reduced to its owner, each updated parameter broadcast from it
        ctx.comm.update(comm_bytes_per_step=float(ctx.comm["grad_bytes"]), comm_buckets_per_step=float(len(params)))
    if ctx.rank == 0:
        print(f"gpt: {type(model).__name__}, {json.dumps(ctx.comm['parallel'])}", flush=True)
    if cfg.pp > 1:
        return model, lambda batch: model.train_batch([batch["input"], batch["labels"]], optimizer)
    steps = methods.Steps(cfg, work, model, optimizer, amp, lambda: None)
    steps.phases = ctx.phases  # the rank's: the loop and trace read the parts from it
    return model, steps.overlapped
