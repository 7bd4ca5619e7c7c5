"""`fleetbench plan`: predict hybrid-parallel GPT training (TP x PP x DP x sharding) on a cluster.

    fleetbench plan --layers L --hidden H --heads A --seq S --vocab V --global-batch B --micro-batch b
                    --tp T --pp P [--dp D | --gpus N] --gpus-per-node G --gpu NAME [--network NAME]
                    [--recompute none|selective|full] [--sharding-stage 0-3] [--sequence-parallel]
                    [--interleave V] [--json]
    fleetbench plan ... --gpus N          (no --tp/--pp: the splits that fit, ranked)
    fleetbench plan --validate [--json]   (every published cell: predicted, published, error)

The model is perfmodel/hybrid.py (docs/guide/gpt.md#fleetbench-plan); GPUs are measure/devices.py's, the network is NICs x a
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
GPU = cmdline.Kind("a known GPU name", _gpu, ("", "tpu-v9"))
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
    p.add_argument("--precision", choices=("fp16", "bf16", "tf32", "fp32"), default="bf16")
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


def _inputs(p: cmdline.Parser, args) -> tuple:
    missing = [f"--{k.replace('_', '-')}" for k in SHAPE_FLAGS if getattr(args, k) is None]
    if missing:
        p.error(f"missing {', '.join(missing)} (expected counts and a GPU name; see {p.prog} --help)")
    if (args.tp is None) != (args.pp is None):
        p.error("--tp and --pp: expected both or neither (neither: search the splits)")
    given = [args.dp is not None, args.gpus is not None]
    if all(given) or not any(given):
        p.error("--dp or --gpus: expected exactly one")
    shape = hybrid.Shape(args.layers, args.hidden, args.heads, args.seq, args.vocab, args.ffn_hidden,
                        args.swiglu, args.flash_attention)
    cluster = hybrid.Cluster(args.gpu, args.gpus_per_node, *args.network, precision=args.precision)
    try:
        cluster.peak_flops
    except KeyError:  # e.g. a K80 has no half-precision math (measure/devices.py)
        p.error(f"--precision {args.precision}: expected one the {cluster.device.name} has "
                f"({', '.join(cluster.device.tflops)})")
    return shape, cluster


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
                                 args.sequence_parallel, args.interleave)
        found, priced = hybrid_search.ranked(shape, args.gpus, args.global_batch, cluster, choices)
        return _print_search(shape, cluster, found[:args.top], priced, len(found), args.json)
    dp = args.dp or args.gpus // (args.tp * args.pp)
    if args.gpus and args.gpus % (args.tp * args.pp):
        p.error(f"--gpus {args.gpus}: expected a multiple of tp x pp ({args.tp * args.pp})")
    split = hybrid.Split(args.tp, args.pp, dp, args.micro_batch or 1, args.global_batch, args.recompute or "none",
                        args.sharding_stage or 0, bool(args.sequence_parallel), args.interleave or 1)
    why = hybrid.check(shape, split, cluster)
    if why:
        p.error(why)
    found = hybrid.predict(shape, split, cluster)
    print(json.dumps(found.as_json(), indent=1) if args.json else "\n".join(describe(found)))
    return 0


def describe(found: hybrid.Prediction) -> list[str]:
    s, c = found.shape, found.cluster
    step, parts, mem = found.step_s, found.parts, {k: v / hybrid.GIB for k, v in found.memory.items()}
    fits = "fits" if found.fits else "DOES NOT FIT"
    return [
        f"GPT {s.parameters() / 1e9:.1f}B parameters ({s.layers} layers, hidden {s.hidden}, {s.heads} heads, "
        f"seq {s.seq}, vocab {s.vocab}) on {found.split.gpus} x {c.device.name} ({c.gpus_per_node} a node, "
        f"{c.nics} x {c.nic_gbit:g} Gb/s), {c.precision}",
        f"split: {found.split.label()}, {found.split.micro_batches} micro-batches a step",
        f"step {step:.3g} s, {found.tokens_per_s:,.0f} tokens/s ({found.tokens_per_s / found.split.gpus:,.0f} a GPU), "
        f"{found.tflops_per_gpu():.1f} TFLOP/s a GPU (model FLOPs; {found.tflops_per_gpu(found.split.recompute):.1f} "
        f"with recomputation), MFU {found.mfu:.1%}",
        f"memory a GPU: {found.memory_gib:.1f} GiB of {c.memory:g} ({fits}): " + ", ".join(
            f"{k} {v:.1f}" for k, v in mem.items()),
        "step split: " + ", ".join(f"{k.replace('_', ' ')} {v:.3g} s ({v / step:.0%})" for k, v in parts.items()),
    ]


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
