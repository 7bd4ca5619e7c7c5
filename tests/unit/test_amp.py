"""amp_level O1|O2 (issue 26 finding 7): the config key, its refusals, and the O2 contract pinned to
the installed Paddle's own source. O2's effect (half-precision weights) needs a GPU; what runs here
is Paddle's own CPU behaviour, which is why the run layer refuses amp on CPU at both levels.
Run under .venv (2.6.2) and .venv3 (3.3.1)."""
import inspect
import warnings

import paddle
import pytest

from fleetbench.measure import config
from fleetbench.train import capability, methods
from fleetbench.train.amp import Precision


def small_model():
    return paddle.nn.Sequential(paddle.nn.Conv2D(3, 4, 3), paddle.nn.BatchNorm2D(4), paddle.nn.Flatten(),
                                paddle.nn.Linear(4 * 6 * 6, 2))


def collective(**values):
    cfg = config.CollectiveConfig()
    for key, value in values.items():
        config.assign(cfg, key, value)
    cfg.validate()
    return cfg


def test_amp_level_is_o1_or_o2_and_o2_needs_a_half_precision():
    assert collective().amp_level == "O1"
    assert collective(amp="bf16", amp_level="O2").amp_level == "O2"
    with pytest.raises(config.ConfigError, match=r"^config key 'amp_level' must be O1 or O2 \(got 'O3'\)$"):
        collective(amp="fp16", amp_level="O3")
    with pytest.raises(config.ConfigError, match=r"^config key 'amp_level' O2 needs amp=fp16 or amp=bf16"):
        collective(amp_level="O2")


def test_o2_refuses_fp16_allreduce_whose_gradients_are_already_half():
    with pytest.raises(config.ConfigError, match=r"^config key 'amp_level' O2 cannot be combined with "
                                                 r"method=fp16_allreduce"):
        methods.check(collective(amp="bf16", amp_level="O2", method="fp16_allreduce"))
    methods.check(collective(amp="bf16", amp_level="O2", method="bsp"))


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_o2_does_nothing_on_cpu_so_amp_is_refused_there(amp):
    """Paddle's decorate and auto_cast at O2, run for real: on a CPU place the weights stay fp32 and
    the output is fp32, with Paddle's own warning. The refusal (capability.amp_missing) says so."""
    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        assert capability.amp_missing(amp) is None or "bfloat16" in capability.amp_missing(amp)
        return
    model = small_model()
    optimizer = paddle.optimizer.Momentum(learning_rate=0.1, parameters=model.parameters())
    precision = Precision(amp, "O2")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        decorated, optimizer = precision.decorate(model, optimizer)
        with precision.forward():
            out = decorated(paddle.randn([2, 3, 8, 8]))
    assert decorated is model and {str(p.dtype) for p in model.parameters()} == {"paddle.float32"}
    assert out.dtype == paddle.float32
    assert any("amp_guard can only be enabled on CUDAPlace" in str(w.message) for w in seen)
    assert capability.amp_missing(amp).startswith(f"config key 'amp' is '{amp}' but this Paddle build ")


def test_o1_leaves_model_and_optimizer_alone():
    model = small_model()
    optimizer = paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    assert Precision("fp16", "O1").decorate(model, optimizer) == (model, optimizer)
    assert Precision("off", "O1").decorate(model, optimizer) == (model, optimizer)


def test_o2_call_binds_to_paddles_decorate_and_auto_cast():
    """The GPU-only path's arguments, bound to the installed functions' own signatures."""
    decorate = inspect.signature(paddle.amp.decorate)
    bound = decorate.bind(models="M", optimizers="O", level="O2", dtype="float16", master_weight=True)
    assert bound.arguments["level"] == "O2" and decorate.parameters["master_weight"].default is None
    auto_cast = inspect.signature(paddle.amp.auto_cast)
    auto_cast.bind(level="O2", dtype="bfloat16")
    source = inspect.getsource(inspect.getmodule(paddle.amp.decorate))
    # O2's master weights reach the optimizer through _multi_precision; at O2 Paddle keeps the
    # norm layers fp32 (need_keep_fp32), which is why O2's gradients have two dtypes.
    assert "_multi_precision = multi_precision" in source and "def need_keep_fp32" in source


@pytest.mark.parametrize("make", [
    lambda p: paddle.optimizer.Momentum(learning_rate=0.1, parameters=p),  # resnet50, vgg16
    lambda p: paddle.optimizer.Adam(learning_rate=0.1, parameters=p),  # transformer, mnist
    lambda p: paddle.optimizer.AdamW(learning_rate=0.1, parameters=p),  # bert_large
    lambda p: paddle.optimizer.SGD(learning_rate=0.1, parameters=p),  # resnet18
])
def test_every_benchmark_optimizer_takes_o2_master_weights(make):
    """decorate sets master weights only on an optimizer with `_multi_precision`; without it O2
    would update half-precision weights in place and lose small updates."""
    assert hasattr(make(small_model().parameters()), "_multi_precision")


def test_bucket_count_starts_a_bucket_where_the_dtype_changes_as_build_groups_does():
    from paddle.distributed.parallel import build_groups

    tensors = [paddle.zeros([n], dtype=d) for n, d in ((100, "float16"), (30, "float16"), (4, "float32"),
                                                       (8, "float32"), (250, "float16"), (7, "float32"))]
    sizes = [int(t.numel()) * t.element_size() for t in tensors]
    for limit in (1, 100, 300, 10**6):
        assert methods.bucket_count(sizes, limit, [str(t.dtype) for t in tensors]) == \
            len(build_groups(tensors, limit)), limit


def test_ctr_refuses_fp16_with_a_sparse_table_gradient():
    """GradScaler unscales dense gradients only (finding 7): fp16 needs sparse_grad=false."""
    import importlib.util

    from util import REPO

    spec = importlib.util.spec_from_file_location("ctr_script", REPO / "collective" / "ctr.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    cfg = script.CTRAllReduceConfig()
    config.assign(cfg, "amp", "fp16")
    with pytest.raises(config.ConfigError, match=r"^config key 'amp' fp16 needs sparse_grad=false"):
        cfg.validate()
    config.assign(cfg, "sparse_grad", "false")
    cfg.validate()
