"""What each family, method and precision needs from the installed Paddle, checked before launch.

These run on every Paddle `make test` uses (2.6.2 in .venv, the current 3.x in .venv3): each test
asserts what that Paddle can and cannot do, so the same file proves the refusal on 3.x and the
absence of a false refusal on 2.6.2.
"""
import configparser
import subprocess

import pytest
import util

from fleetbench.measure import config
from fleetbench.train import capability

CTR = "parameter_server/ctr.py"


def paddle_release():
    import paddle
    return tuple(int(part) for part in paddle.__version__.split(".")[:2])


def build_name() -> str:
    """'Paddle 3.3.1 (CPU build)', as refusals name the installed Paddle."""
    import paddle
    return f"Paddle {paddle.__version__} ({'CUDA' if paddle.is_compiled_with_cuda() else 'CPU'} build)"


def test_parameter_server_support_is_found_exactly_where_paddle_has_it():
    import paddle
    reason = capability.ps_missing()
    if paddle_release() < (3, 0):
        assert reason is None  # 2.6.2: DistFleetWrapper, the PS operators, the legacy static graph
    elif paddle_release() < (3, 1):  # 3.0.x: the parameter server runs on the legacy static graph only
        if paddle.get_flags(["FLAGS_enable_pir_api"])["FLAGS_enable_pir_api"]:
            assert reason.startswith(f"{build_name()} builds programs in PIR, which its parameter server cannot "
                                     "run: set FLAGS_enable_pir_api=0 in the environment, or ")
            assert reason.endswith("pip install -e '.[ps]'") and "\n" not in reason
        else:
            assert reason is None
    else:  # 3.1.0 lacks the operators, 3.1.1+ DistFleetWrapper too
        assert reason.startswith(f"{build_name()} has no parameter-server support (no ")
        assert reason.endswith("pip install -e '.[ps]'") and "\n" not in reason


def ps_job_is_refused():
    return capability.ps_missing() is not None


# The launch path is tried only where this Paddle refuses parameter-server jobs: elsewhere it
# would run a real job, which test_ps.py does.
HOW = ["script", "launch"] if util.PS_MISSING is not None else ["script"]


@pytest.mark.job
@pytest.mark.parametrize("how", HOW)
def test_a_parameter_server_job_on_a_paddle_without_it_is_one_line_before_anything_starts(tmp_path, how):
    """Acceptance (issue 14): ctr.py under 3.3.1 -> one line naming the version and the fix, exit 2,
    nothing launched, nothing stored. On 2.6.2 the same --check passes."""
    store = tmp_path / "r.jsonl"
    kept = util.kept_store(store)
    script_args = [CTR, "--preset", "tiny", "--results", store]
    if how == "script":
        done = util.run_script(*script_args, "--check", timeout=120)
    else:
        done = subprocess.run([util.PYTHON, "-m", "fleetbench", "launch", "--log_dir", tmp_path / "log",
                               "--server_num", "1", "--worker_num", "1", *map(str, script_args)],
                              cwd=util.REPO, env=util.env(), capture_output=True, text=True, timeout=120)
    if not ps_job_is_refused():
        assert done.returncode == 0 and '"mode": "async"' in done.stdout, done.stderr[-2000:]
        return
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert f"ctr: error: {build_name()} has no parameter-server support" in lines[0]
    assert "paddlepaddle==2.6.2" in lines[0] and "'.[ps]'" in lines[0]
    assert not (tmp_path / "log").exists() and store.read_text() == kept


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_amp_is_refused_exactly_where_auto_cast_would_do_nothing(amp):
    import paddle
    assert capability.amp_missing("off") is None
    reason = capability.amp_missing(amp)
    if not paddle.is_compiled_with_cuda() or paddle.device.cuda.device_count() == 0:
        lack = "has no CUDA" if not paddle.is_compiled_with_cuda() else "sees no GPU"
        assert reason.startswith(f"config key 'amp' is '{amp}' but this Paddle build {lack} "
                                 f"(Paddle {paddle.__version__}): auto_cast does nothing on CPU")
        assert "\n" not in reason
    elif amp == "bf16" and not paddle.amp.is_bfloat16_supported():
        assert reason.startswith("config key 'amp' is 'bf16' but this GPU has no bfloat16 arithmetic")
    else:
        assert reason is None  # a visible GPU: AMP runs


def test_every_method_finds_what_it_is_built_from_here():
    from fleetbench.train import methods

    assert set(capability.METHOD_NEEDS) == set(methods.METHODS)
    for method in methods.METHODS:
        assert capability.method_missing(method) is None, method
        cfg = config.CollectiveConfig(method=method, grad_merge_steps=2, warmup_steps=2, steps=4)
        capability.check("collective", cfg)  # raises nothing


def test_a_method_whose_paddle_function_is_gone_is_refused_naming_it(monkeypatch):
    gone = "paddle.distributed.parallel:no_such_bucket_helper"
    monkeypatch.setitem(capability.METHOD_NEEDS, "bsp", (capability.NO_SYNC, gone))
    with pytest.raises(config.ConfigError) as err:
        capability.check("collective", config.CollectiveConfig(method="bsp"))
    assert str(err.value) == (f"config key 'method' is 'bsp' but {build_name()} lacks "
                              f"{gone}, which it is built from; use another method, or paddlepaddle 2.6.2 to 3.3.1")


def test_resolve_walks_modules_and_attributes():
    import paddle
    assert capability.resolve(capability.NO_SYNC) is paddle.DataParallel.no_sync
    with pytest.raises(AttributeError):
        capability.resolve("paddle:DataParallel.no_such_method")
    with pytest.raises(ImportError):
        capability.resolve("paddle.no_such_module:x")


def test_installing_fleetbench_never_replaces_the_users_paddle():
    """Paddle is an extra, never a requirement: pip leaves an installed (GPU, 3.x) Paddle alone."""
    setup = configparser.ConfigParser()
    setup.read(util.REPO / "setup.cfg")
    required = setup["options"]["install_requires"].split()
    assert not [r for r in required if r.startswith("paddle")] and "numpy<2" in required
    extras = {name: value.strip() for name, value in setup["options.extras_require"].items()}
    assert extras["ps"] == extras["cpu"] == "paddlepaddle==2.6.2"
    assert extras["gpu"] == "paddlepaddle-gpu==2.6.2" and extras["cpu3"].startswith("paddlepaddle==3.")


def test_cpu_ranks_are_paddles_own_gloo_switch(monkeypatch):
    """PADDLE_DISTRI_BACKEND=gloo makes init_parallel_env take CPUPlace and gloo on any build
    (Paddle's _is_cpuonly, run here); fleetbench's ranks then train on CPU and refuse amp."""
    import inspect

    from paddle.distributed import parallel

    assert parallel._is_cpuonly("gloo") is True
    assert "os.environ.get('PADDLE_DISTRI_BACKEND', 'auto')" in inspect.getsource(parallel.init_parallel_env)
    monkeypatch.setenv("PADDLE_DISTRI_BACKEND", "gloo")
    from fleetbench.machine import device

    assert device.cpu_ranks_asked() and not device.gpu_ranks()
    assert capability.amp_missing("fp16").startswith("config key 'amp' is 'fp16' but this Paddle build ")
    assert device.device_name() == "cpu"
