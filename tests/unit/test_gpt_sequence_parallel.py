"""What of the GPT benchmark's sequence parallelism a CPU build can check (issue 46): the layout
arithmetic ([seq_len/tp, b, h] between the TP layers, seq_len not divisible by tp refused in one
line), and which parameters are marked for Paddle's sequence-parallel all-reduce hooks (the norms'
weights and biases, nothing else), read from a real model built without TP. The kernels (scatter,
all-gather, reduce-scatter, the hooks' all-reduce) need a GPU build with tp > 1: untested here."""
import types

import pytest

from fleetbench.measure.config import ConfigError
from fleetbench.train import hybrid


@pytest.mark.parametrize("seq_len,batch,hidden,tp,want", [
    (2048, 1, 2048, 8, [256, 1, 2048]),  # GPT-3 XL at tp=8
    (4096, 2, 4096, 4, [1024, 2, 4096]),  # LLaMA-2 7B's sequence
    (32, 4, 64, 2, [16, 4, 64]),  # tiny
])
def test_each_tp_rank_holds_seq_len_over_tp_positions(seq_len, batch, hidden, tp, want):
    assert hybrid.sequence_layout(seq_len, batch, hidden, tp) == want


@pytest.mark.parametrize("seq_len,tp", [(30, 4), (2047, 8), (33, 2)])
def test_a_sequence_tp_does_not_divide_is_refused_in_one_line(seq_len, tp):
    with pytest.raises(ConfigError) as err:
        hybrid.sequence_layout(seq_len, 1, 64, tp)
    message = str(err.value)
    assert "\n" not in message and "config key 'seq_len'" in message and f"tp ({tp})" in message
    assert f"(got {seq_len})" in message


def tiny(**keys) -> types.SimpleNamespace:
    """The keys gpt_model reads, at the tiny preset's shape (fleetbench/presets/gpt.yaml)."""
    base = dict(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, ffn_hidden=0, seq_len=32, norm="layernorm",
                mlp="gelu", position="learned", tp=1, pp=1, sequence_parallel=False, recompute="none",
                num_kv_heads=0, num_experts=0)
    return types.SimpleNamespace(**dict(base, **keys))


@pytest.mark.parametrize("norm,per_norm", [("layernorm", ("weight", "bias")), ("rmsnorm", ("weight",))])
def test_the_hooks_parameters_are_exactly_the_norms(norm, per_norm):
    from fleetbench.train.workloads import gpt_model

    model = gpt_model.build(tiny(norm=norm, mlp="swiglu" if norm == "rmsnorm" else "gelu"))
    norms = [f"blocks.{i}.{n}" for i in range(2) for n in ("norm1", "norm2")] + ["head.norm"]
    assert sorted(gpt_model.sequence_parallel_names(model)) == sorted(f"{n}.{p}" for n in norms for p in per_norm)
    assert all(p.stop_gradient is False for p in model.parameters())  # all trained: the hooks fire on each


def test_building_with_sequence_parallel_marks_those_and_no_other():
    """Paddle's own predicate (what register_sequence_parallel_allreduce_hooks selects by) on every
    parameter of a model built with sequence_parallel (tp=1 here: the same norms, plain linears)."""
    from paddle.distributed.fleet.utils.sequence_parallel_utils import is_sequence_parallel_parameter

    from fleetbench.train.workloads import gpt_model

    plain, marked = gpt_model.build(tiny()), gpt_model.build(tiny(sequence_parallel=True))
    assert not any(is_sequence_parallel_parameter(p) for p in plain.parameters())
    got = sorted(name for name, p in marked.named_parameters() if is_sequence_parallel_parameter(p))
    assert got == sorted(gpt_model.sequence_parallel_names(marked)) and len(got) == 10


@pytest.mark.parametrize("llama", [False, True])
def test_the_sequence_first_layers_compute_what_the_batch_first_ones_do(llama):
    """The blocks and head of a sequence_parallel model take [s, b, h] and give the batch-first
    [b, s, vocab] logits of the same weights: the transposes around attention and after the logits
    are right. At tp=1 the linears are plain (no all-gather, no reduce-scatter: those and the
    embedding's ScatterOp need a TP group, untested here), so this checks the layout only."""
    import paddle

    from fleetbench.train.workloads import gpt_model

    keys = dict(norm="rmsnorm", mlp="swiglu", position="rotary") if llama else {}
    paddle.seed(7)
    plain, sequence_first = gpt_model.build(tiny(**keys)), gpt_model.build(tiny(sequence_parallel=True, **keys))
    sequence_first.set_state_dict(plain.state_dict())
    x = plain.embed(paddle.randint(0, 256, [3, 32]))  # [b, s, h], b != s/tp so a wrong transpose shows

    def run(model, h):
        for block in model.blocks:
            h = block(h)
        return model.head(h)
    want, got = run(plain, x), run(sequence_first, x.transpose([1, 0, 2]))
    assert got.shape == want.shape == [3, 32, 256]
    assert float((got - want).abs().max()) < 1e-5
