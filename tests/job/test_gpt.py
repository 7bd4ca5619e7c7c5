"""The GPT benchmark on 2 CPU ranks (gloo), on whichever Paddle runs the suite (2.6.2; 3.3.1 under
`make test-paddle3`): data parallel and sharding stage 1 train for real, on a tokenised text file,
give the same losses for the same seed, and record tokens/s, FLOPs and memory; what a CPU build
cannot run (tp, pp, sequence parallelism, sharding stages 2-3) is refused in one line, exit 2,
before any rank starts. tiny_gqa (grouped-query attention) and tiny_moe (experts local to every
rank) train on 2 ranks too; expert (ep) and segment (sep) parallelism are refused the same way."""
import pytest
import util

from fleetbench.measure import flops, metrics
from fleetbench.store import results

pytestmark = pytest.mark.job


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("text") / "docs.npy"
    assert util.cli_code(__import__("datasets.cli", fromlist=["cli"]).cli, ["gen", "text", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory, text_file):
    """The records of data parallel and sharding stage 1, same seed, same data."""
    got = {}
    for stage in (0, 1):
        tmp = tmp_path_factory.mktemp(f"gpt-stage{stage}")
        proc = util.fleetrun(tmp / "log", "--nproc_per_node", 2, "collective/gpt.py", "--preset", "tiny", "--set",
                             f"sharding_stage={stage}", "--set", f"data.path={text_file}", "--results", tmp / "r.jsonl",
                             **util.CPU_RANKS)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (got[stage],) = util.records(tmp / "r.jsonl")
    return got


def test_both_train_and_the_loss_falls(pair):
    for record in pair.values():
        m = record["metrics"]
        assert record["benchmark"] == "gpt" and record["world_size"] == 2 and record["error"] is None
        assert m["loss_last"] < 0.8 * m["loss_first"], (m["loss_first"], m["loss_last"])
        assert set(m) <= set(metrics.DEFINITIONS)


def test_sharding_stage_1_and_data_parallel_give_the_same_losses(pair):
    dp, sharded = pair[0]["metrics"], pair[1]["metrics"]
    assert (dp["loss_first"], dp["loss_last"]) == pytest.approx((sharded["loss_first"], sharded["loss_last"]), rel=1e-5)
    assert dp["parallel"]["dp_degree"] == 2 and dp["parallel"]["sharding_degree"] == 1
    assert sharded["parallel"]["dp_degree"] == 1 and sharded["parallel"]["sharding_degree"] == 2


def test_the_record_has_tokens_flops_and_memory(pair):
    for record in pair.values():
        m, c = record["metrics"], record["config"]
        assert m["unit"] == "tokens/s" and m["throughput_per_device"] == pytest.approx(m["throughput"] / 2)
        per_token = flops.gpt_train_flops_per_token(c["num_layers"], c["hidden_size"], c["seq_len"], c["vocab_size"])
        assert m["flops_per_token"] == per_token
        assert m["model_tflops_per_device"] == pytest.approx(per_token * m["throughput_per_device"] / 1e12)
        # MFU: the formula's FLOPs over the peak every benchmark is held to (on CPU the GEMM rate the
        # ranks measured, train/trace.model_flops), one definition (docs/guide/gpt.md, docs/reference/metrics.md#mfu)
        assert m["model_flops_per_sample"] == per_token * c["seq_len"]
        assert m["mfu"] == pytest.approx(m["model_flops_per_sample"] * m["samples_per_s"] / m["peak_flops"])
        assert 0 < m["mfu"] <= 1
        assert m["peak_mem_mib"] > 0 and m["grad_bytes"] > 0
        results.validate(record)


@pytest.mark.parametrize("key", ["tp=2", "pp=2", "sharding_stage=2", "sharding_stage=3"])
def test_a_cpu_build_refuses_model_parallelism_in_one_line(tmp_path, key):
    proc = util._run([util.PYTHON, "-m", "fleetbench", "launch", "--nproc_per_node", "2", "--log_dir",
                      str(tmp_path / "log"), "collective/gpt.py", "--preset", "tiny", "--set", key], 120, util.CPU_RANKS)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"config key '{key.split('=')[0]}'" in lines[0] and "CPU build" in lines[0] and "GPU builds only" in lines[0]
    assert not (tmp_path / "log").exists() or not list((tmp_path / "log").glob("workerlog.*"))


def test_a_cpu_build_refuses_sequence_parallelism_in_one_line_naming_it(tmp_path):
    # wired (gpt_model, hybrid.prepare) but Paddle's sequence-parallel linears are its TP layers,
    # which a CPU build refuses: named as the key asked for, not as its prerequisite tp
    proc = util._run([util.PYTHON, "-m", "fleetbench", "launch", "--nproc_per_node", "2", "--log_dir",
                      str(tmp_path / "log"), "collective/gpt.py", "--preset", "tiny", "--set", "tp=2", "--set",
                      "sequence_parallel=true"], 120, util.CPU_RANKS)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "config key 'sequence_parallel' is True" in lines[0] and "GPU builds only" in lines[0]
    assert not (tmp_path / "log").exists() or not list((tmp_path / "log").glob("workerlog.*"))


def test_a_sequence_tp_does_not_divide_is_refused_in_one_line():
    proc = util.run_script("collective/gpt.py", "--preset", "tiny", "--set", "tp=4", "--set", "sequence_parallel=true",
                           "--set", "seq_len=30", "--check")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "config key 'seq_len' must be a multiple of tp (4)" in proc.stderr


def test_llama_layers_train_and_recomputation_changes_no_loss(tmp_path):
    """tiny_llama (RMSNorm, SwiGLU, rotary) in one process: recomputation (a block, or attention's
    core) reruns the same forward, so the losses are those of no recomputation."""
    losses = {}
    for mode in ("none", "selective", "full"):
        out = tmp_path / f"{mode}.jsonl"
        proc = util.run_script("collective/gpt.py", "--preset", "tiny_llama", "--set", f"recompute={mode}",
                               "--results", out)
        assert proc.returncode == 0, proc.stderr[-2000:]
        (record,) = util.records(out)
        losses[mode] = (record["metrics"]["loss_first"], record["metrics"]["loss_last"])
        assert record["metrics"]["parallel"]["recompute"] == mode
    assert losses["selective"] == pytest.approx(losses["none"], rel=1e-5) == losses["full"]
    assert losses["none"][1] < 0.8 * losses["none"][0]


@pytest.fixture(scope="module")
def gqa_moe(tmp_path_factory):
    """tiny_gqa and tiny_moe on 2 CPU ranks, data parallel (every rank holds all the experts)."""
    got = {}
    for preset in ("tiny_gqa", "tiny_moe"):
        tmp = tmp_path_factory.mktemp(preset)
        proc = util.fleetrun(tmp / "log", "--nproc_per_node", 2, "collective/gpt.py", "--preset", preset,
                             "--results", tmp / "r.jsonl", **util.CPU_RANKS)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (got[preset],) = util.records(tmp / "r.jsonl")
    return got


@pytest.mark.parametrize("preset", ["tiny_gqa", "tiny_moe"])
def test_gqa_and_moe_train_and_the_loss_falls(gqa_moe, preset):
    record = gqa_moe[preset]
    m = record["metrics"]
    assert record["world_size"] == 2 and record["error"] is None and m["parallel"]["dp_degree"] == 2
    # loss_first and loss_last are the means of the first and last 4-step windows of 24 steps
    assert m["loss_last"] < 0.8 * m["loss_first"], (m["loss_first"], m["loss_last"])
    results.validate(record)


@pytest.mark.parametrize("preset", ["tiny_gqa", "tiny_moe"])
def test_gqa_and_moe_mfu_is_the_active_flops_over_the_measured_gemm(gqa_moe, preset):
    m, c = gqa_moe[preset]["metrics"], gqa_moe[preset]["config"]
    moe = flops.MoeShape(c["num_experts"], c["top_k"], c["num_layers"]) if c["num_experts"] else None
    per_token = flops.gpt_train_flops_per_token(c["num_layers"], c["hidden_size"], c["seq_len"], c["vocab_size"],
                                                c["ffn_hidden"] or None, c["mlp"] == "swiglu",
                                                kv_share=(c["num_kv_heads"] or c["num_heads"]) / c["num_heads"], moe=moe)
    assert m["flops_per_token"] == per_token == {"tiny_gqa": 700416, "tiny_moe": 1133568}[preset]  # by hand: unit
    assert m["peak_flops_source"].startswith("fp32 GEMM measured") and m["peak_flops"] > 0
    assert m["mfu"] == pytest.approx(per_token * c["seq_len"] * m["samples_per_s"] / m["peak_flops"])
    assert 0 < m["mfu"] <= 1


@pytest.mark.parametrize("key,says", [("ep=2", "gloo, which has no all-to-all"), ("sep=2", "GPU builds only")])
def test_a_cpu_build_refuses_expert_and_segment_parallelism_in_one_line(tmp_path, key, says):
    sets = ["--set", key] + (["--preset", "tiny_moe"] if key.startswith("ep") else ["--preset", "tiny"])
    proc = util._run([util.PYTHON, "-m", "fleetbench", "launch", "--nproc_per_node", "2", "--log_dir",
                      str(tmp_path / "log"), "collective/gpt.py", *sets], 120, util.CPU_RANKS)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"config key '{key.split('=')[0]}' is 2" in lines[0] and "CPU" in lines[0] and says in lines[0]
    if key.startswith("ep"):
        assert "CUDA build" in lines[0] and "NCCL" in lines[0]
    assert not (tmp_path / "log").exists() or not list((tmp_path / "log").glob("workerlog.*"))
