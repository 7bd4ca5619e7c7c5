"""The GPT benchmark's grouped-query attention and mixture of experts, what a CPU can check without
ranks: the FLOPs MFU is taken from (GQA's smaller K/V projections; MoE's active experts only)
against counts made here by hand, parameter counts against the published models', the config's
refusals (one line, naming the --set key), and the layers themselves built and run for real: K/V
heads shared by their group's query heads, tokens routed to top_k experts within capacity, the
load-balancing loss training the router."""
import importlib.util
import types

import paddle
import pytest

from fleetbench.measure import flops
from fleetbench.measure.config import ConfigError
from fleetbench.train import hybrid
from fleetbench.train.workloads import gpt_model, moe

spec = importlib.util.spec_from_file_location("_gpt_moe_script", "collective/gpt.py")
gpt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpt)


def test_gqa_flops_by_hand():
    # tiny_gqa: h 64, 4 heads of 16, 2 K/V heads, SwiGLU 176, s 32, V 256, 2 layers
    q_and_out, k_and_v = 2 * 64 * 64, 2 * 64 * (2 * 16)  # weights' elements: K, V are 64 x 32 each
    mlp, scores, logits = 3 * 64 * 176, 2 * 32 * 64, 64 * 256  # multiply-adds a token
    forward = 2 * (2 * (q_and_out + k_and_v + mlp + scores) + logits)
    cfg = gpt.GptConfig(hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden=176, mlp="swiglu", seq_len=32,
                        vocab_size=256, num_layers=2)
    assert hybrid.utilization(cfg)({"throughput_per_device": 1.0})["flops_per_token"] == 3 * forward == 700416


def test_moe_flops_count_the_active_experts_only():
    # tiny_moe: 4 GELU experts of 256 in both layers, top-2, router 64 x 4
    projections, expert, router, scores, logits = 4 * 64 * 64, 2 * 64 * 256, 64 * 4, 2 * 32 * 64, 64 * 256
    forward = 2 * (2 * (projections + 2 * expert + router + scores) + logits)
    cfg = gpt.GptConfig(hidden_size=64, num_heads=4, seq_len=32, vocab_size=256, num_layers=2, num_experts=4, top_k=2)
    assert hybrid.utilization(cfg)({"throughput_per_device": 1.0})["flops_per_token"] == 3 * forward == 1133568
    # more experts held, the same routed to: the same FLOPs but for the router's columns
    more = flops.gpt_train_flops_per_token(2, 64, 32, 256, moe=flops.MoeShape(64, 2, 2))
    assert more - 3 * forward == 3 * 2 * 2 * 64 * (64 - 4)


def test_moe_every_other_layer_counts_half_the_layers():
    cfg = gpt.GptConfig(num_layers=4, hidden_size=64, num_heads=4, num_experts=4, moe_every=2)
    assert hybrid.moe_shape(cfg) == flops.MoeShape(4, 2, 2)
    assert [gpt_model.is_moe_layer(cfg, i) for i in range(4)] == [False, True, False, True]


def test_parameters_match_the_published_models():
    # Mixtral 8x7B: 46.7B parameters, 12.9B active (Jiang et al. 2024); LLaMA-3 8B: 8.03B. Both untie
    # the output layer, which gpt_parameters ties: one vocab x hidden more
    mixtral = dict(layers=32, hidden=4096, vocab=32000, ffn=14336, gated=True, kv_share=0.25, moe_layers=32)
    untied = 32000 * 4096
    assert flops.gpt_parameters(**mixtral, experts=8) + untied == pytest.approx(46.7e9, rel=0.01)
    assert flops.gpt_parameters(**mixtral, experts=2) + untied == pytest.approx(12.9e9, rel=0.02)
    llama3 = flops.gpt_parameters(32, 4096, 128256, 14336, True, kv_share=0.25) + 128256 * 4096
    assert llama3 == pytest.approx(8.03e9, rel=0.01)


@pytest.mark.parametrize("keys,key", [
    (dict(num_heads=4, hidden_size=64, num_kv_heads=3), "num_kv_heads"),
    (dict(num_heads=4, hidden_size=64, num_kv_heads=-1), "num_kv_heads"),
    (dict(num_heads=8, hidden_size=64, num_kv_heads=2, tp=4), "tp"),
    (dict(num_experts=4, top_k=5), "top_k"),
    (dict(num_experts=6, ep=4), "ep"),
    (dict(ep=2), "ep"),
    (dict(num_experts=4, moe_every=0), "moe_every"),
    (dict(num_experts=4, capacity_factor=-1.0), "capacity_factor"),
    (dict(sep=3), "sep"),
])
def test_bad_inputs_are_refused_in_one_line_naming_the_key(keys, key):
    with pytest.raises(ConfigError) as err:
        gpt.GptConfig(**keys).validate()
    assert "\n" not in str(err.value) and str(err.value).startswith(f"config key '{key}'"), err.value


def tiny(**keys) -> types.SimpleNamespace:
    return types.SimpleNamespace(**dict(dict(
        vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=0, ffn_hidden=0, seq_len=8,
        norm="layernorm", mlp="gelu", position="learned", tp=1, pp=1, ep=1, sequence_parallel=False,
        recompute="none", num_experts=0, top_k=2, moe_every=1, capacity_factor=0.0, aux_loss_coef=0.01), **keys))


def test_gqa_projects_k_and_v_for_the_kv_heads_only():
    paddle.seed(1)
    attn = gpt_model.Attention(tiny(num_kv_heads=1))  # multi-query: one K/V head of 16
    assert attn.qkv.weight.shape == [64, 64 + 2 * 16]
    assert attn(paddle.randn([2, 8, 64])).shape == [2, 8, 64]


def test_kv_heads_equal_to_heads_is_the_classic_layout():
    paddle.seed(1)
    classic, same = gpt_model.Attention(tiny()), gpt_model.Attention(tiny(num_kv_heads=4))
    same.set_state_dict(classic.state_dict())
    x = paddle.randn([2, 8, 64])
    assert paddle.allclose(classic(x), same(x)).item()


def test_a_token_goes_to_its_top_k_experts_within_capacity():
    paddle.seed(1)
    cfg = tiny(num_experts=4, top_k=2, capacity_factor=0.5)
    layer = moe.LocalExperts(cfg, lambda: paddle.nn.Linear(64, 64))
    assert moe.capacity(cfg, 16) == 4  # 0.5 x 16 tokens x 2 / 4 experts
    x = paddle.randn([2, 8, 64])
    x.stop_gradient = False
    out = layer(x)
    out.sum().backward()  # the balance loss adds its gradient into the router's
    assert out.shape == [2, 8, 64] and layer.router.weight.grad is not None
    # an expert's output for a token it holds: the token's weight x the expert's output
    probs = paddle.nn.functional.softmax(layer.router(x.reshape([-1, 64])), -1)
    weights, index = paddle.topk(probs, 2, -1)
    weights = weights / weights.sum(-1, keepdim=True)
    want = sum(weights[0, j] * layer.experts[int(index[0, j])](x[0, 0]) for j in range(2))
    first_two = [int(e) for e in index[0]]  # token 0 comes first: inside every capacity
    assert len(set(first_two)) == 2 and paddle.allclose(out[0, 0], want, atol=1e-5).item()


def test_the_balance_loss_is_one_when_balanced_and_grows_with_imbalance():
    even = paddle.full([8, 4], 0.25)
    index = paddle.to_tensor([[0, 1], [2, 3]] * 4)
    assert float(moe.balance_loss(even, index, 4)) == pytest.approx(1.0)
    skewed = paddle.to_tensor([[0.7, 0.1, 0.1, 0.1]] * 8)
    assert float(moe.balance_loss(skewed, paddle.to_tensor([[0, 1]] * 8), 4)) == pytest.approx(4 * (0.5 * 0.7 + 0.5 * 0.1))


def test_ep_other_than_the_data_parallel_width_is_refused_in_one_line():
    cfg = tiny(num_experts=8, ep=4, tp=2, sep=1, sharding_stage=0)
    hybrid.check_experts(cfg, 8)  # 8 ranks / tp 2: a data-parallel width of 4
    with pytest.raises(ConfigError) as err:
        hybrid.check_experts(cfg, 16)
    assert "\n" not in str(err.value) and "config key 'ep' (4) must equal" in str(err.value) and "= 8" in str(err.value)
