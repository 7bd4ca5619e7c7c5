"""`fleetbench plan`: predict hybrid-parallel GPT training (TP x CP x PP x DP x EP, sharding) on a cluster.

    fleetbench plan --layers L --hidden H --heads A --seq S --vocab V --global-batch B --micro-batch b
                    --tp T --pp P [--dp D | --gpus N] --gpus-per-node G --gpu NAME [--network NAME]
                    [--recompute none|selective|full] [--sharding-stage 0-3] [--sequence-parallel]
                    [--interleave V] [--json]
                    [--kv-heads K] [--head-dim D] [--precision fp8] [--gpu-tflops X] [--gpu-memory-gib M]
                    [--stage-layers a,b,...] [--cp N | --sep N] [--shard-group N] [--distributed-optimizer]
                    [--overlap-grad-reduce] [--overlap-param-gather] [--tp-comm-overlap] [--ep-a2a-overlap]
                    [--experts E --top-k k [--ep N] [--etp N] [--moe-ffn-hidden F] [--shared-experts S]
                     [--dense-layers D] [--capacity-factor C] [--expert-imbalance X]]
    fleetbench plan ... --gpus N          (no --tp/--pp: the splits that fit, ranked)
    fleetbench plan --validate [--json]   (every published cell: predicted, published, error)

The model is perfmodel/hybrid.py (docs/guide/plan.md); GPUs are measure/devices.py's, the network is NICs x a
rate (`8x200gbit`, or a profile of `fleetbench cluster`: `100gbe`), all-reduces perfmodel/nccl.py's.
"""
from __future__ import annotations

import json
import re
import sys

from fleetbench import cmdline
from fleetbench.emulate import netem_plan
from fleetbench.measure import devices
from fleetbench.perfmodel import hybrid, hybrid_search, hybrid_tables

DEFAULT_NETWORK = "8x200gbit"  # a DGX A100/H100 node: 8 HDR/NDR InfiniBand NICs of 200 Gb/s


def _network(text: str) -> tuple[int, float]:
    """(NICs a node, Gbit/s a NIC) from `NxRATE` or `RATE` (a rate or a netem profile name)."""
    m = re.fullmatch(r"\s*(?:(\d+)\s*x\s*)?(.+?)\s*", str(text))
    if m is None:
        raise ValueError(text)
    nics = int(m.group(1) or 1)
    rate = netem_plan.PROFILES.get(m.group(2).lower()) if m.group(2).lower() in netem_plan.PROFILES \
        else netem_plan.parse_rate(m.group(2))
    if not rate or nics < 1:
        raise ValueError(text)
    return nics, rate / 1e9


def _gpu(text: str) -> str:
    if devices.lookup(text) is None:
        raise cmdline.Refused(f"{text!r}: expected a GPU of measure/devices.py ({devices.known()})")
    return text


NETWORK = cmdline.Kind("NICs x rate a node (8x200gbit) or a profile (100gbe)", _network,
                       ("", "abc", "0x100gbit", "unshaped"))
def _layer_list(text: str) -> tuple:
    found = tuple(int(x, 10) for x in str(text).split(","))
    if not found or min(found) < 1:
        raise ValueError(text)
    return found


GPU = cmdline.Kind("a known GPU name", _gpu, ("", "tpu-v9"))
LAYER_LIST = cmdline.Kind("layers a stage, comma-separated counts >= 1 (30,32,32,32)", _layer_list,
                          ("", "a,b", "4,0,4", "4,,4"))
MOE_FLAGS = ("top_k", "ep", "etp", "moe_ffn_hidden", "shared_experts", "dense_layers", "capacity_factor", "expert_imbalance")
SHAPE_FLAGS = ("layers", "hidden", "heads", "seq", "vocab", "global_batch", "gpu", "gpus_per_node")


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench plan", description=__doc__.split("\n\n")[0])
    for flag in ("layers", "hidden", "heads", "seq", "vocab", "global-batch", "micro-batch", "tp", "pp", "dp",
                 "gpus", "gpus-per-node"):
        p.add_argument(f"--{flag}", type=cmdline.COUNT)
    p.add_argument("--ffn-hidden", type=cmdline.COUNT, help="MLP width (default 4 x hidden)")
    p.add_argument("--swiglu", action="store_true", help="LLaMA's gated MLP (3 matrices)")
    p.add_argument("--flash-attention", action="store_true", help="no s x s attention activations kept")
    p.add_argument("--gpu", type=GPU, help=f"one of {devices.known()} (memory size: A100-40GB)")
    p.add_argument("--precision", choices=("fp16", "bf16", "tf32", "fp32", "fp8"), default="bf16",
                   help="fp8: the linear layers' GEMMs in FP8 as Transformer Engine runs them (H100, H200, B200)")
    p.add_argument("--gpu-tflops", type=cmdline.number(0.0), help="the GPU's own dense bf16 peak (a power-capped part)")
    p.add_argument("--gpu-memory-gib", type=cmdline.number(0.0), help="the GPU's own memory, GiB")
    p.add_argument("--kv-heads", type=cmdline.COUNT, help="K/V heads (grouped-query attention; 1: multi-query)")
    p.add_argument("--head-dim", type=cmdline.COUNT, help="a head's width where heads x head-dim != hidden")
    p.add_argument("--stage-layers", type=LAYER_LIST, help="layers each pipeline stage (uneven stages)")
    p.add_argument("--cp", type=cmdline.COUNT, help="context parallelism: ring attention over N ranks")
    p.add_argument("--sep", type=cmdline.COUNT, help="Paddle's segment parallelism (sep_degree): all-to-all of Q, K, V")
    p.add_argument("--shard-group", type=cmdline.COUNT, help="FSDP hybrid sharding: shard over N dp ranks, replicate across")
    p.add_argument("--distributed-optimizer", action="store_true", help="Megatron's: optimizer state sharded over dp")
    p.add_argument("--overlap-grad-reduce", action="store_true", help="gradient reduction under the backward")
    p.add_argument("--overlap-param-gather", action="store_true", help="weight all-gather under the next forward")
    p.add_argument("--tp-comm-overlap", action="store_true", help="TP's all-gathers/reduce-scatters under its GEMMs")
    p.add_argument("--ep-a2a-overlap", action="store_true", help="EP's all-to-alls under another micro-batch's compute")
    p.add_argument("--experts", type=cmdline.COUNT, help="routed experts a layer (mixture-of-experts)")
    p.add_argument("--top-k", type=cmdline.COUNT, help="experts a token is routed to")
    p.add_argument("--ep", type=cmdline.COUNT, help="expert parallelism (ranks the experts are split over)")
    p.add_argument("--etp", type=cmdline.COUNT, help="expert tensor parallelism (default tp; below it EP spans TP ranks)")
    p.add_argument("--moe-ffn-hidden", type=cmdline.COUNT, help="an expert's MLP width (default --ffn-hidden)")
    p.add_argument("--shared-experts", type=cmdline.NON_NEGATIVE, help="experts every token runs through")
    p.add_argument("--dense-layers", type=cmdline.NON_NEGATIVE, help="leading layers with a dense MLP")
    p.add_argument("--capacity-factor", type=cmdline.number(0.0), help="tokens an expert takes, x the mean")
    p.add_argument("--expert-imbalance", type=cmdline.number(1.0, low_included=True),
                   help="tokens the busiest expert gets, x the mean (default 1: balanced)")
    p.add_argument("--network", type=NETWORK, default=_network(DEFAULT_NETWORK),
                   help=f"NICs x rate a node (default {DEFAULT_NETWORK})")
    p.add_argument("--recompute", choices=("none", "selective", "full"))
    p.add_argument("--sharding-stage", type=cmdline.integer(0, 3))
    p.add_argument("--sequence-parallel", action="store_true", default=None)
    p.add_argument("--interleave", type=cmdline.COUNT, help="model chunks a GPU (interleaved 1F1B)")
    p.add_argument("--top", type=cmdline.COUNT, default=10, help="splits listed by a search (default 10)")
    p.add_argument("--validate", action="store_true", help="predict every cell of the published tables")
    p.add_argument("--json", action="store_true")
    return p


def _moe(p: cmdline.Parser, args) -> hybrid.Moe | None:
    given = [f"--{k.replace('_', '-')}" for k in MOE_FLAGS if getattr(args, k) is not None]
    if args.experts is None:
        if given:
            p.error(f"{given[0]}: expected --experts E (an MoE model) with it")
        return None
    if args.top_k is None:
        p.error("--experts: expected --top-k k with it (experts a token is routed to)")
    return hybrid.Moe(args.experts, args.top_k, args.moe_ffn_hidden, args.shared_experts or 0, args.dense_layers or 0,
                      args.capacity_factor, args.expert_imbalance or 1.0)


def _cluster(p: cmdline.Parser, args) -> hybrid.Cluster:
    cluster = hybrid.Cluster(args.gpu, args.gpus_per_node, *args.network, precision=args.precision,
                             memory_gib=args.gpu_memory_gib, tflops=args.gpu_tflops)
    try:
        cluster.peak_flops, cluster.fp8_flops
    except KeyError:  # e.g. a K80 has no half-precision math, an A100 no FP8 (measure/devices.py)
        p.error(f"--precision {args.precision}: expected one the {cluster.device.name} has "
                f"({', '.join(cluster.device.tflops)})")
    return cluster


def _inputs(p: cmdline.Parser, args) -> tuple:
    missing = [f"--{k.replace('_', '-')}" for k in SHAPE_FLAGS if getattr(args, k) is None]
    if missing:
        p.error(f"missing {', '.join(missing)} (expected counts and a GPU name; see {p.prog} --help)")
    if (args.tp is None) != (args.pp is None):
        p.error("--tp and --pp: expected both or neither (neither: search the splits)")
    given = [args.dp is not None, args.gpus is not None]
    if all(given) or not any(given):
        p.error("--dp or --gpus: expected exactly one")
    if args.kv_heads is not None and args.kv_heads > args.heads:
        p.error(f"--kv-heads {args.kv_heads}: expected at most --heads {args.heads}")
    shape = hybrid.Shape(args.layers, args.hidden, args.heads, args.seq, args.vocab, args.ffn_hidden,
                         args.swiglu, args.flash_attention, args.kv_heads, args.head_dim, _moe(p, args))
    return shape, _cluster(p, args)


OVERLAP_FLAGS = {"grad_reduce": "overlap_grad_reduce", "param_gather": "overlap_param_gather",
                 "tp_comm": "tp_comm_overlap", "ep_a2a": "ep_a2a_overlap"}


def _overlap(args) -> frozenset:
    return frozenset(k for k, flag in OVERLAP_FLAGS.items() if getattr(args, flag))


def _split(p: cmdline.Parser, args) -> hybrid.Split:
    model_parallel = args.tp * args.pp * (args.cp or 1) * (args.sep or 1)
    if args.gpus and args.gpus % model_parallel:
        p.error(f"--gpus {args.gpus}: expected a multiple of tp x pp"
                + (" x cp x sep" if model_parallel != args.tp * args.pp else "") + f" ({model_parallel})")
    dp = args.dp or args.gpus // model_parallel
    return hybrid.Split(args.tp, args.pp, dp, args.micro_batch or 1, args.global_batch, args.recompute or "none",
                        args.sharding_stage or 0, bool(args.sequence_parallel), args.interleave or 1,
                        cp=args.cp or 1, sep=args.sep or 1, ep=args.ep or 1,
                        stage_layers=args.stage_layers and hybrid.fold_stages(args.stage_layers, args.pp),
                        overlap=_overlap(args), distributed_optimizer=args.distributed_optimizer,
                        shard_group=args.shard_group, etp=args.etp)


def cli(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.validate:
        return _validate(args.json)
    shape, cluster = _inputs(p, args)
    if args.tp is None:
        if args.gpus is None:
            p.error("--dp without --tp/--pp: expected --gpus N for a search of the splits")
        choices = hybrid_search.Choices(None, None, args.micro_batch, args.recompute, args.sharding_stage,
                                        args.sequence_parallel, args.interleave, args.cp, args.ep, args.sep,
                                        args.stage_layers, _overlap(args), args.distributed_optimizer,
                                        args.shard_group, args.etp)
        found, priced = hybrid_search.ranked(shape, args.gpus, args.global_batch, cluster, choices)
        return _print_search(shape, cluster, found[:args.top], priced, len(found), args.json)
    split = _split(p, args)
    why = hybrid.check(shape, split, cluster)
    if why:
        p.error(why)
    found = hybrid.predict(shape, split, cluster)
    print(json.dumps(found.as_json(), indent=1) if args.json else "\n".join(describe(found)))
    return 0


def _shape_words(s: hybrid.Shape) -> str:
    """The shape's newer features, in words (empty for a dense multi-head model)."""
    words = [f"{s.kv_heads} kv heads"] if s.kv_heads is not None else []
    words += [f"head width {s.head_dim}"] if s.head_dim is not None else []
    if s.moe:
        m = s.moe
        words += [f"{m.experts} experts top-{m.top_k}" + (f" + {m.shared} shared" if m.shared else "")
                  + (f", expert width {m.ffn}" if m.ffn else "") + (f", {m.dense_layers} dense layers" if m.dense_layers else "")
                  + f", {s.active_parameters() / 1e9:.1f}B active" + (f", load x{m.load:g}" if m.load != 1 else "")]
    return "".join(", " + w for w in words)


def describe(found: hybrid.Prediction) -> list[str]:
    s, c = found.shape, found.cluster
    step, parts, mem = found.step_s, found.parts, {k: v / hybrid.GIB for k, v in found.memory.items()}
    fits = "fits" if found.fits else "DOES NOT FIT"
    precision = "fp8 (the linear GEMMs; MFU against the bf16 peak)" if found.fp8 else c.precision
    gpu = c.device.name + (f" at {c.tflops:g} TFLOP/s bf16" if c.tflops else "")
    lines = [
        f"GPT {s.parameters() / 1e9:.1f}B parameters ({s.layers} layers, hidden {s.hidden}, {s.heads} heads"
        f"{_shape_words(s)}, seq {s.seq}, vocab {s.vocab}) on {found.split.gpus} x {gpu} ({c.gpus_per_node} a node, "
        f"{c.nics} x {c.nic_gbit:g} Gb/s), {precision}",
        f"split: {found.split.label()}, {found.split.micro_batches} micro-batches a step",
        f"step {step:.3g} s, {found.tokens_per_s:,.0f} tokens/s ({found.tokens_per_s / found.split.gpus:,.0f} a GPU), "
        f"{found.tflops_per_gpu():.1f} TFLOP/s a GPU (model FLOPs; {found.tflops_per_gpu(found.split.recompute):.1f} "
        f"with recomputation), MFU {found.mfu:.1%}",
        f"memory a GPU: {found.memory_gib:.1f} GiB of {c.memory:g} ({fits}): " + ", ".join(
            f"{k} {v:.1f}" for k, v in mem.items()),
        "step split: " + ", ".join(f"{k.replace('_', ' ')} {v:.3g} s ({v / step:.0%})" for k, v in parts.items()),
    ]
    if found.hidden:
        lines.append("overlapped with compute (not in the step): " + ", ".join(
            f"{k.replace('_', ' ')} {v:.3g} s" for k, v in found.hidden.items()))
    return lines


def _print_search(shape, cluster, found, priced: int, fitting: int, as_json: bool) -> int:
    if as_json:
        print(json.dumps([f.as_json() for f in found], indent=1))
        return 0 if found else 1
    print(f"{priced} splits priced, {fitting} fit in {cluster.memory:g} GiB; the {len(found)} fastest:")
    print(f"{'split':<44} {'step_s':>8} {'tokens/s':>12} {'TFLOP/s':>8} {'MFU':>6} {'GiB':>6}  exposed")
    for f in found:
        print(f"{f.split.label():<44} {f.step_s:>8.3g} {f.tokens_per_s:>12,.0f} {f.tflops_per_gpu():>8.1f} "
              f"{f.mfu:>6.1%} {f.memory_gib:>6.1f}  {f.parts['exposed'] / f.step_s:.0%}")
    if not found:
        print("no split fits: more GPUs, a smaller micro-batch or model, or a GPU with more memory", file=sys.stderr)
    return 0 if found else 1


def _validate(as_json: bool) -> int:
    all_tables = hybrid_tables.tables()
    rows = [(t, hybrid_tables.cells(t)) for t in all_tables]
    if as_json:
        print(json.dumps({t["file"]: {"cells": [dict(c.__dict__, error=c.error) for c in cs],
                                      "summary": hybrid_tables.summary(cs), "role": t["role"]} for t, cs in rows}, indent=1))
        return 0
    print(f"{'table':<28} {'role':<5} {'cell':<30} {'published':>9} {'predicted':>9} {'error':>7}  note")
    for t, cs in rows:
        for c in cs:
            pred = f"{c.predicted:9.1f}" if c.predicted is not None else f"{'-':>9}"
            err = f"{c.error:+7.1%}" if c.error is not None else f"{'-':>7}"
            print(f"{c.table[:28]:<28} {c.role:<5} {c.name[:30]:<30} {c.published:9.1f} {pred} {err}  {c.note}")
    for label, picked in (("fit tables", [c for _, cs in rows for c in cs if c.role == "fit"]),
                          ("check tables", [c for _, cs in rows for c in cs if c.role == "check"])):
        got = hybrid_tables.summary(picked)
        median = "-" if got["median_abs_error"] is None else f"{got['median_abs_error']:.1%}"
        print(f"{label}: {got['cells']} cells, {got['priced']} priced, {got['within_15pct']:.0%} within 15%, "
              f"median |error| {median}")
    print("TFLOP/s a GPU as each table counts them (its `flops`: with full recomputation's forward, or model "
          "FLOPs); tokens/s converted with measure/flops.py")
    return 0
