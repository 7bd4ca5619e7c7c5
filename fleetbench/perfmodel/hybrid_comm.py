"""The collectives of hybrid-parallel training, in seconds: TP's all-reduces, PP's sends, the DP
gradient all-reduce, sharding stage 3's per-layer gathers, context parallelism's ring exchange,
Paddle's segment-parallel all-to-alls and expert parallelism's dispatch and combine. Pure code;
perfmodel/hybrid.py adds them to the step and says what of each hides under compute.

Links: NVLink inside a node at NVLINK_SHARE of its per-direction rate (NCCL's bus bandwidth), the
network at NET_SHARE of the NICs' line rate, NCCL's per-step latencies (perfmodel/nccl.py). A ring
all-gather or reduce-scatter of S bytes over n ranks on N nodes (what NCCL runs for both at every
width: its tree is for all-reduce only) takes (n - N) intra-node steps and N - 1 network steps of
latency plus (n - 1)/n S at the slowest hop's bandwidth: at thousands of ranks the latency of a
layer's gather is milliseconds, which is why ZeRO-3 at large DP width is slower than its bytes say.
"""
from __future__ import annotations

import math

from fleetbench.perfmodel import alphabeta, nccl
from fleetbench.perfmodel.hybrid_split import Cluster, Shape, Split

NVLINK_SHARE = 0.77    # NCCL all-reduce bus bandwidth / NVLink per direction (230 of 300 GB/s, DGX A100)
NET_SHARE = 0.90       # of the NICs' line rate an all-reduce or a send delivers
ACT_BYTES = 2          # bf16/fp16 activations and gradients on the wire
BUCKET_BYTES = 40e6    # gradients are all-reduced in buckets (Megatron, Paddle: tens of MB)


def tp_link(cluster: Cluster, ranks: int) -> alphabeta.Link:
    bus = cluster.device.nvlink_GBps * NVLINK_SHARE or nccl.PCIE_GBPS[4] * NVLINK_SHARE
    return alphabeta.Link(0.0, bus, ranks, "NVLink").with_hop_us(nccl.DEFAULT_HOP_US["nvlink"], "NCCL default")


def net_GBps(cluster: Cluster) -> float:
    return cluster.nics * cluster.nic_gbit / 8.0 * NET_SHARE


def _gpu_net_GBps(cluster: Cluster) -> float:
    """The network one GPU has when every GPU of its node sends at once (rails shared)."""
    return net_GBps(cluster) / cluster.gpus_per_node


def tp_comm_s(shape: Shape, split: Split, cluster: Cluster, layers: float) -> float:
    """TP's all-reduces (or SP's reduce-scatter + all-gather, the same bytes) a micro-batch on a
    stage of `layers` layers: 4 a layer (6 with full recomputation) of the micro-batch's activations."""
    if split.tp == 1:
        return 0.0
    calls = 6 if split.recompute == "full" else 4
    nbytes = split.micro_batch * shape.seq * shape.hidden * ACT_BYTES / (split.cp * split.sep)
    return layers * calls * tp_link(cluster, split.tp).allreduce_ms(nbytes, 1) / 1e3


def pp_p2p_s(shape: Shape, split: Split, cluster: Cluster) -> float:
    """An activation forward and a gradient back a stage and micro-batch (scatter-gather over TP)."""
    if split.pp == 1:
        return 0.0
    nbytes = split.micro_batch * shape.seq * shape.hidden * ACT_BYTES / split.tp / (split.cp * split.sep)
    hop_s = nbytes / (cluster.nic_gbit / 8.0 * NET_SHARE * 1e9) + nccl.DEFAULT_HOP_US["net"] / 1e6
    return 2 * split.interleave * hop_s


def _dp_link(cluster: Cluster, ranks: int, stride: int) -> nccl.NcclLink:
    """NCCL over `ranks` GPUs `stride` apart (the model-parallel ranks between them)."""
    per_node = max(1, min(ranks, cluster.gpus_per_node // stride))
    nodes = math.ceil(ranks / per_node)
    intra = alphabeta.Link(0.0, tp_link(cluster, 2).bandwidth_GBps, per_node, "NVLink").with_hop_us(
        nccl.DEFAULT_HOP_US["nvlink"], "NCCL default")
    # a ring leaves a node once a channel, the channels spread over its NICs: the group's bus
    # bandwidth is the NICs' share it gets (its node's NICs shared by the stride groups there), as
    # nccl.py's B says; inside one node the network takes no part
    share = net_GBps(cluster) / min(stride, cluster.gpus_per_node) if nodes > 1 else intra.bandwidth_GBps
    inter = alphabeta.Link(0.0, share, max(nodes, 2), "NICs").with_hop_us(nccl.DEFAULT_HOP_US["net"], "NCCL default")
    return nccl.NcclLink(intra, inter, nodes, per_node)


def allreduce_s(cluster: Cluster, ranks: int, stride: int, nbytes: float) -> float:
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    link = _dp_link(cluster, ranks, stride)
    return link.allreduce_ms(nbytes, max(1, math.ceil(nbytes / BUCKET_BYTES))) / 1e3


def ring_gather_s(cluster: Cluster, ranks: int, stride: int, nbytes: float) -> float:
    """One ring all-gather (or reduce-scatter) of `nbytes` in all over `ranks` GPUs (module doc)."""
    if ranks <= 1:
        return 0.0
    link = _dp_link(cluster, ranks, stride)
    n, nodes = link.ranks, link.nodes
    latency_us = (n - nodes) * link.intra.hop_alpha_us + (nodes - 1) * link.inter.hop_alpha_us
    return latency_us / 1e6 + (n - 1) / n * nbytes / (link.bandwidth_GBps * 1e9)


def stage_parameters(shape: Shape, split: Split, layers: float) -> tuple:
    """(dense, routed-expert) parameters a GPU holds for `layers` layers (embedding aside)."""
    experts = shape.routed_expert_parameters() / shape.layers * layers / split.expert_split
    dense = (shape.parameters() - shape.vocab * shape.hidden - shape.routed_expert_parameters()) / shape.layers
    return dense * layers / split.tp, experts


def dp_comm_s(shape: Shape, split: Split, cluster: Cluster) -> float:
    """Seconds of the gradient all-reduce (sharding stages 1-2: reduce-scatter + all-gather, the same
    bytes) a step; stage 2 every micro-batch (a rank keeps only its gradient shard, so accumulation
    cannot wait). Stage 3 is zero3_s's."""
    if split.dp * split.cp == 1:
        return 0.0
    if shape.moe is None and split.cp == 1:
        nbytes = shape.parameters() / (split.tp * split.pp) * ACT_BYTES
        seconds = allreduce_s(cluster, split.dp, split.tp, nbytes)
    else:
        dense, experts = stage_parameters(shape, split, shape.layers / split.pp)
        dense += shape.vocab * shape.hidden / (split.tp * split.pp)
        ranks, stride = split.dp * split.cp, split.tp
        seconds = allreduce_s(cluster, ranks, stride, dense * ACT_BYTES) + allreduce_s(
            cluster, split.expert_dp, split.expert_split, experts * ACT_BYTES)
    if split.sharding_stage == 2:
        seconds *= split.micro_batches
    return seconds


def zero3_layer_s(shape: Shape, split: Split, cluster: Cluster) -> tuple:
    """(all-gather, reduce-scatter) seconds of one layer's weights over the shard group, ring (module
    doc); FSDP's hybrid sharding shards over its shard group only."""
    dense, experts = stage_parameters(shape, split, 1)
    ranks, stride = split.shard_degree, split.tp * split.cp
    gather = ring_gather_s(cluster, ranks, stride, (dense + experts) * ACT_BYTES)
    return gather, gather


def replica_allreduce_s(shape: Shape, split: Split, cluster: Cluster) -> float:
    """FSDP hybrid sharding: the gradient shards all-reduced across the dp / shard_group replicas, once a step."""
    if not split.shard_group or split.dp == split.shard_group:
        return 0.0
    dense, experts = stage_parameters(shape, split, shape.layers / split.pp)
    shard = (dense + experts + shape.vocab * shape.hidden / split.tp) * ACT_BYTES / split.shard_group
    return allreduce_s(cluster, split.dp // split.shard_group, split.tp * split.shard_group, shard)


def _group_link_GBps(cluster: Cluster, span: int) -> tuple[float, float]:
    """(GB/s a GPU sends, per-message latency in s) in a group spanning `span` consecutive GPUs."""
    if span <= cluster.gpus_per_node:
        return tp_link(cluster, 2).bandwidth_GBps, nccl.DEFAULT_HOP_US["nvlink"] / 1e6
    return _gpu_net_GBps(cluster), nccl.DEFAULT_HOP_US["net"] / 1e6


def cp_ring_step_s(shape: Shape, split: Split, cluster: Cluster) -> float:
    """Ring attention (Megatron's context parallelism): one of the cp - 1 steps of a layer's forward,
    sending this rank's K and V chunk (b s/cp x 2 kv width x 2 bytes / tp) to the next CP rank."""
    kv_width = (shape.attention_width or shape.hidden) * shape.kv_share
    nbytes = split.micro_batch * shape.seq / split.cp * 2 * kv_width * ACT_BYTES / split.tp
    bandwidth, hop = _group_link_GBps(cluster, split.tp * split.cp)
    return hop + nbytes / (bandwidth * 1e9)


def sep_alltoall_s(shape: Shape, split: Split, cluster: Cluster, layers: float) -> float:
    """Paddle's segment parallelism (sep_degree, Ulysses-style): a layer's forward trades Q, K, V
    (sequence-split to head-split) and the output back in all-to-alls over the sep group, backward
    the same again: none of it hides (attention waits for its heads)."""
    if split.sep == 1:
        return 0.0
    width = shape.attention_width or shape.hidden
    moved = split.micro_batch * shape.seq / split.sep * width * (2 + 2 * shape.kv_share) * ACT_BYTES / split.tp
    bandwidth, hop = _group_link_GBps(cluster, split.tp * split.sep)
    one_pass = 4 * hop + moved * (split.sep - 1) / split.sep / (bandwidth * 1e9)
    return layers * 2 * one_pass


def ep_alltoall_s(shape: Shape, split: Split, cluster: Cluster, layers: float) -> float:
    """Expert parallelism's all-to-alls a micro-batch on a stage: dispatch and combine forward, the
    same backward, each moving a rank's tokens x top_k x hidden x 2 bytes ((ep - 1)/ep of them leave
    the rank), the busiest rank's share x the router's imbalance; NVLink when the EP group (ep ranks
    tp x cp apart) fits in a node, else the node's NICs shared by its GPUs."""
    m = shape.moe
    if m is None or split.ep == 1:
        return 0.0
    moe_layers = layers * shape.moe_layers / shape.layers
    tokens = split.micro_batch * shape.seq / (split.cp * split.sep * split.tp if split.sequence_parallel else split.cp * split.sep)
    nbytes = tokens * m.top_k * shape.hidden * ACT_BYTES * m.load * (split.ep - 1) / split.ep
    bandwidth, hop = _group_link_GBps(cluster, split.ep_span)
    return moe_layers * 4 * (hop * 2 + nbytes / (bandwidth * 1e9))
