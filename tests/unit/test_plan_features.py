"""fleetbench plan for today's configurations: GQA and head widths, FP8 and the newer GPUs, uneven
pipeline stages, ZeRO-3 at large DP width, overlapped communication and the distributed optimizer,
context and segment parallelism, mixture-of-experts with expert parallelism: parameter counts against
the model makers' published sizes, memory and time against hand derivations, refusals in one line."""
import dataclasses
import subprocess
import sys
import time

import pytest
from util import REPO

from fleetbench.measure import devices
from fleetbench.perfmodel import hybrid, hybrid_comm, hybrid_search

H100 = hybrid.Cluster("H100", 8, 8, 400.0)
H100_FP8 = hybrid.Cluster("H100", 8, 8, 400.0, precision="fp8")
LLAMA3_8B = hybrid.Shape(32, 4096, 32, 8192, 128256, 14336, True, True, kv_heads=8)
LLAMA3_70B = hybrid.Shape(80, 8192, 64, 8192, 128256, 28672, True, True, kv_heads=8)
GPT175 = hybrid.Shape(96, 12288, 96, 2048, 51200)
MIXTRAL = hybrid.Shape(32, 4096, 32, 4096, 32000, 14336, True, True, kv_heads=8, moe=hybrid.Moe(8, 2))


def untied(shape: hybrid.Shape) -> float:
    """Parameters as the makers count them: the output layer apart from the embedding."""
    return shape.parameters() + shape.vocab * shape.hidden


@pytest.mark.parametrize("shape,published", [
    (LLAMA3_8B, 8.03e9), (LLAMA3_70B, 70.6e9),  # Meta's model cards
    # Qwen3-32B: 64 heads of 128 (8192 wide) on hidden 5120, 8 kv heads; Qwen's 32.8 B
    (hybrid.Shape(64, 5120, 64, 4096, 151936, 25600, True, True, kv_heads=8, head_dim=128), 32.8e9),
    (MIXTRAL, 46.7e9),  # Mistral's: 8 experts of 14336, all held
])
def test_parameters_are_the_makers_published_sizes(shape, published):
    assert untied(shape) == pytest.approx(published, rel=0.01)


def test_moe_flops_count_the_active_parameters_only():
    # Mixtral: 12.9 B active (two experts a token), 46.7 B held
    assert MIXTRAL.active_parameters() + MIXTRAL.vocab * MIXTRAL.hidden == pytest.approx(12.9e9, rel=0.01)
    # 6 x active parameters a token, + the attention scores (GQA does not shrink them)
    scores = 3 * 32 * 2 * 2 * 4096 * 4096
    router = 3 * 32 * 2 * 4096 * 8
    assert MIXTRAL.flops_per_token() == pytest.approx(6 * (MIXTRAL.active_parameters() - 32 * 9 * 4096 - 2 * 4096 - 32 * 4096 * 8)
                                                      + scores + router, rel=1e-9)


def test_work_by_precision_adds_up_to_the_flops_of_a_token():
    for shape in (LLAMA3_8B, MIXTRAL, GPT175):
        for recompute in ("none", "selective", "full"):
            assert hybrid.work_per_token(shape, recompute).total == pytest.approx(shape.flops_per_token(recompute))


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_gqa_keeps_kv_activations_at_their_width(tp):
    s, h = LLAMA3_8B.seq, LLAMA3_8B.hidden
    # Korthikanti's 10 + 24/t with K and V (2 + 2 of the 24) at 8/32 of their width: 10 + 21/t
    split = hybrid.Split(tp, 1, 1, 1, 1)
    assert hybrid.layer_activation_bytes(LLAMA3_8B, split, "none") == pytest.approx(s * h * (10 + 21 / tp))
    # FP8 (Transformer Engine keeps the linear layers' inputs in 1 byte): QKV and MLP inputs 2 -> 1
    # (replicated 10 -> 8), projection 2 -> 1 and fc2 8 -> 4 (split 21 -> 16)
    assert hybrid.layer_activation_bytes(LLAMA3_8B, split, "none", fp8=True) == pytest.approx(s * h * (8 + 16 / tp))


def test_kv_heads_must_split_or_replicate_over_tp():
    shape = hybrid.Shape(32, 4096, 32, 4096, 32000, kv_heads=6)
    assert "not a multiple of kv heads" in hybrid.check(shape, hybrid.Split(1, 1, 8, 1, 8), H100)
    mqa = hybrid.Shape(32, 4096, 32, 4096, 32000, kv_heads=1)
    assert hybrid.check(mqa, hybrid.Split(8, 1, 1, 1, 8), H100) is None  # one K/V head replicated on 8 ranks


def test_fp8_runs_the_linear_gemms_at_the_fp8_peak_and_the_rest_in_bf16():
    split = hybrid.Split(8, 1, 1, 1, 8, sequence_parallel=True)
    bf16, fp8 = (hybrid.predict(LLAMA3_70B, split, c) for c in (H100, H100_FP8))
    assert fp8.parts["compute"] < bf16.parts["compute"]
    w = hybrid.work_per_token(LLAMA3_70B, "none")
    # the GEMMs at twice the rate: what is saved is at most half the GEMMs' share, less the casts
    saved = 1 - fp8.parts["compute"] / bf16.parts["compute"]
    assert 0.2 < saved < 0.5 * w.gemm / w.total
    assert fp8.mfu == pytest.approx(fp8.tflops_per_gpu() * 1e12 / 989.4e12)  # MFU against the bf16 peak
    assert fp8.memory["fp8_weights"] > 2 * LLAMA3_70B.parameters() / 8 * 0.95


def test_newer_gpus_and_a_gpu_given_by_its_figures():
    assert devices.memory_gib("B200") == 180 and devices.hbm_GBps("H200") == 4800.0
    split = hybrid.Split(8, 1, 1, 1, 8, sequence_parallel=True)
    full = hybrid.predict(LLAMA3_70B, split, H100)
    capped = hybrid.predict(LLAMA3_70B, split, hybrid.Cluster("H100", 8, 8, 400.0, tflops=989.4 / 2, memory_gib=64))
    gemm = full.parts["compute"] - split.micro_batches * hybrid.memory_bound_s(LLAMA3_70B, split, H100, 80)
    assert capped.parts["compute"] == pytest.approx(full.parts["compute"] + gemm)  # half the peak: the GEMMs twice as long
    assert capped.cluster.memory == 64


def test_uneven_stages_run_at_the_slowest_stage_with_the_rest_once():
    stages = (7, 8, 8, 8, 8, 8, 8, 7)
    shape = hybrid.Shape(62, 8192, 64, 4096, 128256, 28672, True, True, kv_heads=8)
    split = hybrid.Split(8, 8, 4, 1, 64, sequence_parallel=True, stage_layers=stages)
    found = hybrid.predict(shape, split, H100)
    times = [sum(hybrid._stage_parts(shape, split, H100, st)[0].values()) for st in hybrid._stages(shape, split)]
    m = split.micro_batches
    assert found.step_s - found.parts["dp_comm"] == pytest.approx((m - 1) * max(times) + sum(times))
    # the last stage holds the logits: with 7 layers it is still not faster than an 8-layer middle one here
    assert times[-1] > times[0]
    # memory: the first stage (8 micro-batches in flight) of 7 layers and the embedding is the fullest
    memory = hybrid.stage_memory(shape, split, H100)
    assert sum(found.memory.values()) == max(sum(d.values()) for d in memory)


@pytest.mark.parametrize("stages,words", [((8, 8, 8), "3 stages, expected pp 4"), ((8, 8, 8, 7), "sum to 31"),
                                          ((16, 16, 0, 0), "to hold a layer")])
def test_bad_stage_layers_are_refused(stages, words):
    shape = hybrid.Shape(32, 4096, 32, 4096, 32000)
    assert words in hybrid.check(shape, hybrid.Split(1, 4, 2, 1, 8, stage_layers=stages), H100)


def test_the_distributed_optimizer_holds_megatrons_6_plus_12_over_d_bytes():
    # Megatron-Core's distributed optimizer docs: bf16 parameters, fp32 gradients: 6 + 12/d bytes a parameter
    for d in (2, 8, 64):
        mem = hybrid.memory_bytes(GPT175, hybrid.Split(8, 8, d, 1, 8 * d, distributed_optimizer=True))
        params = mem["weights"] / 2
        assert (mem["weights"] + mem["gradients"] + mem["optimizer"]) / params == pytest.approx(6 + 12 / d)


def test_ring_gathers_pay_a_latency_a_step_at_large_width():
    # 2048 ranks on 256 nodes: (2048 - 256) NVLink steps of 3.4 us and 255 network steps of 14 us
    seconds = hybrid_comm.ring_gather_s(H100, 2048, 1, 1.0)
    assert seconds == pytest.approx(((2048 - 256) * 3.4 + 255 * 14.0) / 1e6, rel=1e-6)


def test_zero3_exposes_what_the_layers_compute_cannot_cover_and_grows_with_dp():
    shape = hybrid.Shape(32, 4096, 32, 4096, 32000, 11008, True, True)
    exposed = []
    for dp in (8, 64, 512, 2048):
        split = hybrid.Split(1, 1, dp, 1, 2 * dp, sharding_stage=3)
        found = hybrid.predict(shape, split, H100)
        exposed.append(found.parts["dp_comm"])
        gather, scatter = hybrid_comm.zero3_layer_s(shape, split, H100)
        assert found.parts["dp_comm"] + found.hidden.get("dp_comm", 0.0) == pytest.approx(
            split.micro_batches * (32 * (2 * gather + scatter) + gather))  # everything, once
    assert exposed == sorted(exposed) and exposed[-1] > 3 * exposed[0]


def test_fsdp_hybrid_sharding_shards_inside_the_group_and_replicates_across():
    full = hybrid.memory_bytes(LLAMA3_8B, hybrid.Split(1, 1, 64, 1, 64, sharding_stage=3))
    hsdp = hybrid.memory_bytes(LLAMA3_8B, hybrid.Split(1, 1, 64, 1, 64, sharding_stage=3, shard_group=8))
    assert hsdp["optimizer"] == pytest.approx(full["optimizer"] * 8)
    assert hybrid.check(LLAMA3_8B, hybrid.Split(1, 1, 64, 1, 64, sharding_stage=3, shard_group=6), H100)


def test_overlap_hides_what_fits_under_the_compute_it_overlaps():
    base = dict(tp=8, pp=1, dp=64, micro_batch=1, global_batch=64, sequence_parallel=True, distributed_optimizer=True)
    plain = hybrid.predict(LLAMA3_70B, hybrid.Split(**base), H100)
    both = hybrid.predict(LLAMA3_70B, hybrid.Split(**base, overlap=frozenset(hybrid.OVERLAPS)), H100)
    assert both.step_s < plain.step_s
    for part in ("tp_comm", "dp_comm"):
        assert both.parts[part] + both.hidden.get(part, 0.0) == pytest.approx(plain.parts[part])
    # the 70B's GEMMs are far longer than its TP collectives: all hides but the first of tp chunks
    assert both.parts["tp_comm"] == pytest.approx(plain.parts["tp_comm"] / 8)


def test_context_parallelism_divides_activations_and_hides_the_ring_under_attention():
    long = hybrid.Shape(32, 4096, 32, 131072, 128256, 14336, True, True, kv_heads=8)
    one = hybrid.Split(1, 1, 1, 1, 1)
    four = hybrid.Split(1, 1, 1, 1, 1, cp=4)
    assert hybrid.layer_activation_bytes(long, four, "none") == pytest.approx(
        hybrid.layer_activation_bytes(long, one, "none") / 4)
    # a step sends this rank's K and V chunk: b s/cp x 2 x (8 x 128) x 2 bytes
    step = hybrid_comm.cp_ring_step_s(long, four, H100)
    assert step == pytest.approx(3.4e-6 + 131072 / 4 * 2 * 1024 * 2 / (450 * 0.77 * 1e9))
    found = hybrid.predict(long, four, H100)
    assert found.parts["cp_comm"] == pytest.approx(0.0) and found.hidden["cp_comm"] > 0
    assert "multiple of 2 x cp" in hybrid.check(hybrid.Shape(2, 64, 4, 100, 10), hybrid.Split(1, 1, 1, 1, 1, cp=8), H100)


def test_sep_trades_qkv_in_all_to_alls_none_of_it_hidden():
    shape = hybrid.Shape(32, 4096, 32, 32768, 32000, kv_heads=8)
    found = hybrid.predict(shape, hybrid.Split(1, 1, 1, 1, 1, sep=4), H100)
    assert found.parts["sep_comm"] > 0 and "sep_comm" not in found.hidden
    assert "heads 32 do not divide among tp 8 x sep 8" in hybrid.check(
        shape, hybrid.Split(8, 1, 1, 1, 1, sep=8), hybrid.Cluster("H100", 64))


def test_experts_split_over_ep_and_the_all_to_all_crosses_nodes_beyond_one():
    in_node = hybrid.Split(1, 1, 8, 1, 8, ep=8)
    local = hybrid.Split(1, 1, 8, 1, 8)
    spread = hybrid.Split(2, 1, 8, 1, 8, ep=8)
    mem_ep, mem_local = (hybrid.memory_bytes(MIXTRAL, s) for s in (in_node, local))
    routed = MIXTRAL.routed_expert_parameters()
    assert mem_local["weights"] - mem_ep["weights"] == pytest.approx(2 * routed * 7 / 8)
    # dispatch + combine, forward and backward: 4 x tokens x top_k x hidden x 2 bytes x 7/8 a layer
    nbytes = 4096 * 2 * 4096 * 2 * 7 / 8
    assert hybrid_comm.ep_alltoall_s(MIXTRAL, in_node, H100, 32) == pytest.approx(
        32 * 4 * (2 * 3.4e-6 + nbytes / (450 * 0.77 * 1e9)))
    assert hybrid_comm.ep_alltoall_s(MIXTRAL, spread, H100, 32) > 3 * hybrid_comm.ep_alltoall_s(MIXTRAL, in_node, H100, 32)
    skewed = dataclasses.replace(MIXTRAL, moe=hybrid.Moe(8, 2, imbalance=1.5, capacity_factor=1.25))
    assert skewed.moe.load == 1.25  # the capacity caps the busiest expert
    assert hybrid.predict(skewed, in_node, H100).step_s > hybrid.predict(MIXTRAL, in_node, H100).step_s


def plan(*args):
    return subprocess.run([sys.executable, "-m", "fleetbench", "plan", *args], cwd=REPO, capture_output=True, text=True)


LLAMA405 = ("--layers", "126", "--hidden", "16384", "--heads", "128", "--kv-heads", "8", "--ffn-hidden", "53248",
            "--swiglu", "--flash-attention", "--seq", "8192", "--vocab", "128256", "--global-batch", "2048",
            "--gpus-per-node", "8", "--gpu", "H100", "--network", "8x400gbit")
DEEPSEEK = ("--layers", "61", "--hidden", "7168", "--heads", "128", "--head-dim", "56", "--ffn-hidden", "18432",
            "--swiglu", "--flash-attention", "--seq", "4096", "--vocab", "129280", "--global-batch", "15360",
            "--gpus-per-node", "8", "--gpu", "H800", "--network", "8x400gbit", "--experts", "256", "--top-k", "8",
            "--moe-ffn-hidden", "2048", "--shared-experts", "1", "--dense-layers", "3", "--precision", "fp8")


@pytest.mark.parametrize("shape", [LLAMA405, DEEPSEEK])
def test_plan_searches_16384_gpus_of_todays_models_in_under_10_seconds(shape):
    start = time.perf_counter()
    out = plan(*shape, "--gpus", "16384", "--top", "5")
    assert out.returncode == 0, out.stderr
    assert time.perf_counter() - start < 10
    rows = out.stdout.splitlines()[2:]
    assert len(rows) == 5 and all("%" in r for r in rows)
    if "--experts" in shape:
        assert all(" ep" in r for r in rows)   # expert parallelism is searched
    else:
        assert any("stages" in r for r in rows)  # 126 layers: uneven stages are searched


def test_search_covers_context_parallelism_for_long_sequences():
    long = hybrid.Shape(32, 4096, 32, 65536, 128256, 14336, True, True, kv_heads=8)
    splits = hybrid_search.candidates(long, 64, 64, H100, hybrid_search.Choices())
    assert {s.cp for s in splits} == {1, 2, 4, 8}
    assert hybrid_search.balanced_stages(126, 16) == (7,) + (8,) * 14 + (7,)


@pytest.mark.parametrize("args,words", [
    (["--precision", "fp8", "--gpu", "A100"], "--precision fp8: expected one the A100-SXM has"),
    (["--top-k", "2"], "--top-k: expected --experts E"),
    (["--experts", "8"], "--experts: expected --top-k k"),
    (["--experts", "8", "--top-k", "2", "--ep", "3"], "--experts 8 do not divide among ep 3"),
    (["--kv-heads", "64"], "--kv-heads 64: expected at most --heads 32"),
    (["--stage-layers", "4,0"], "--stage-layers"),
    (["--pp", "2", "--stage-layers", "10,10,12"], "--stage-layers has 3 stages, expected pp 2"),
    (["--pp", "2", "--stage-layers", "8,8,8,4"], "--stage-layers sum to 28"),  # 4 virtual stages of pp 2, folded
    (["--cp", "3"], "multiple of 2 x cp 3"),
    (["--cp", "2", "--sep", "2"], "--cp and --sep"),
    (["--tp-comm-overlap"], "--tp-comm-overlap needs --sequence-parallel"),
    (["--overlap-param-gather"], "--overlap-param-gather needs --distributed-optimizer"),
    (["--shard-group", "4"], "--shard-group 4: expected a divisor of dp"),
    (["--gpu-tflops", "0"], "--gpu-tflops"),
    (["--capacity-factor", "0", "--experts", "8", "--top-k", "2"], "--capacity-factor"),
    (["--expert-imbalance", "0.5", "--experts", "8", "--top-k", "2"], "--expert-imbalance"),
])
def test_every_new_flag_refuses_bad_values_in_one_line(args, words):
    base = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--seq", "4100", "--vocab", "32000",
            "--global-batch", "64", "--gpus-per-node", "8", "--tp", "1", "--pp", "1", "--dp", "8"]
    if "--gpu" not in args:
        base += ["--gpu", "H100"]
    out = plan(*base, *args)
    assert out.returncode == 2 and words in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def test_moe_parallel_folding_lets_ep_span_tp_ranks_with_expert_tp_below_tp():
    # tp 4, dp 2: EP 8 cannot come out of dp alone; with expert TP 1 the experts fold over tp x dp
    folded = hybrid.Split(4, 1, 2, 1, 8, sequence_parallel=True, ep=8, etp=1)
    assert "EP across TP ranks" in hybrid.check(MIXTRAL, hybrid.Split(4, 1, 2, 1, 8, ep=8), H100)
    assert hybrid.check(MIXTRAL, folded, H100) is None
    mem = hybrid.memory_bytes(MIXTRAL, folded)
    dense = hybrid.memory_bytes(MIXTRAL, hybrid.Split(4, 1, 2, 1, 8, sequence_parallel=True))
    routed = MIXTRAL.routed_expert_parameters()
    # every GPU holds 1 of 8 experts whole (not a quarter of 8): 2 bytes x routed / 8, against routed / 4
    assert mem["weights"] - dense["weights"] == pytest.approx(2 * routed / 8 - 2 * routed / 4)
    assert folded.expert_dp == 1 and folded.ep_span == 8


def test_ep_a2a_overlap_hides_the_all_to_all_under_compute_and_needs_ep():
    split = hybrid.Split(1, 1, 8, 1, 8, ep=8)
    plain = hybrid.predict(MIXTRAL, split, H100)
    hidden = hybrid.predict(MIXTRAL, dataclasses.replace(split, overlap=frozenset({"ep_a2a"})), H100)
    assert hidden.parts["ep_comm"] + hidden.hidden["ep_comm"] == pytest.approx(plain.parts["ep_comm"])
    assert "--ep-a2a-overlap needs --ep > 1" in hybrid.check(
        MIXTRAL, hybrid.Split(1, 1, 8, 1, 8, overlap=frozenset({"ep_a2a"})), H100)
