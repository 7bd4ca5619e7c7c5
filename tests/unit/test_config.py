"""Config resolution: defaults <- preset <- --set, typed, with one-line errors naming the key."""
import ast
import dataclasses
import importlib.util
import os

import pytest

from datasets import mnist as mnist_data
from fleetbench.measure import config, registry


@dataclasses.dataclass
class ToyConfig(config.CollectiveConfig):
    image_size: int = 224
    data_format: str = "NCHW"


@pytest.fixture
def presets(tmp_path, monkeypatch):
    (tmp_path / "toy.yaml").write_text(
        "full: {}\n"
        "tiny: {image_size: 32, batch_size: 8, steps: 12, warmup_steps: 2, data: {num_workers: 0}}\n"
        "tiny_nhwc: {extends: tiny, data_format: NHWC}\n"
        "loop_a: {extends: loop_b}\nloop_b: {extends: loop_a}\n"
        "broken: {nosuch: 1}\n")
    monkeypatch.setattr(config, "PRESET_DIR", tmp_path)


def test_defaults_are_the_full_preset(presets):
    cfg = config.build("toy", ToyConfig, "full")
    assert (cfg.image_size, cfg.batch_size, cfg.method) == (224, 32, "mgwfbp")


def test_preset_overrides_only_what_it_names_and_extends_chains(presets):
    cfg = config.build("toy", ToyConfig, "tiny_nhwc")
    assert (cfg.image_size, cfg.batch_size, cfg.data_format, cfg.data.num_workers) == (32, 8, "NHWC", 0)
    assert cfg.lr == ToyConfig().lr


def test_set_is_typed_and_dotted(presets):
    cfg = config.build("toy", ToyConfig, "tiny", ["lr=1e-3", "data.path=/x", "data.strict=true",
                                                  "steps=20", "data.path=null"])
    assert cfg.lr == pytest.approx(1e-3) and isinstance(cfg.lr, float)
    assert cfg.data.strict is True and cfg.steps == 20 and cfg.data.path is None


@pytest.mark.parametrize("sets, message", [
    (["batch_size=0"], "config key 'batch_size' must be > 0 (got 0)"),
    (["steps=2"], "config key 'steps' must be > warmup_steps (2) (got 2)"),
    (["nosuch=1"], "--set: unknown config key 'nosuch'"),
    (["data.nosuch=1"], "--set: unknown config key 'data.nosuch'"),
    (["batch_size=eight"], "config key 'batch_size' expects int (got 'eight')"),
    (["batch_size=1.5"], "config key 'batch_size' expects int (got '1.5')"),
    (["data=1"], "config key 'data' is a group"),
    (["batch_size"], "--set: expected key=value (got 'batch_size')"),
    (["amp=fp8"], "config key 'amp' must be off, fp16 or bf16"),
])
def test_bad_values_name_the_key_in_one_line(presets, sets, message):
    with pytest.raises(config.ConfigError) as err:
        config.build("toy", ToyConfig, "tiny", sets)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_presets_are_named(presets, tmp_path):
    with pytest.raises(config.ConfigError, match=r"unknown preset 'huge' for toy \(available: broken, full"):
        config.build("toy", ToyConfig, "huge")
    with pytest.raises(config.ConfigError, match="extends itself"):
        config.build("toy", ToyConfig, "loop_a")
    with pytest.raises(config.ConfigError, match=r"toy.yaml \[broken\]: unknown config key 'nosuch'"):
        config.build("toy", ToyConfig, "broken")
    with pytest.raises(config.ConfigError, match="no presets file for benchmark 'other'"):
        config.build("other", ToyConfig, "tiny")


def script_config_class(bench: registry.Benchmark):
    """The dataclass a registered script runs with: the second argument of its one call
    `main(__file__, Config, ...)` or `run.start(__file__, Config, ...)`, read from the script's
    source and looked up in the script imported as a module (its job runs only as __main__)."""
    tree = ast.parse(bench.path.read_text())
    calls = {ast.unparse(node.args[1]) for node in ast.walk(tree) if isinstance(node, ast.Call)
             and len(node.args) > 1 and isinstance(node.args[0], ast.Name) and node.args[0].id == "__file__"}
    assert len(calls) == 1, f"{bench.script}: expected one call passing (__file__, ConfigClass), found {calls}"
    spec = importlib.util.spec_from_file_location(f"_preset_check_{bench.family}_{bench.name}", bench.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = eval(calls.pop(), vars(module))  # a name or dotted name the script itself resolves
    assert dataclasses.is_dataclass(cls) and hasattr(cls, "validate"), (bench.script, cls)
    return cls


# Presets that read a data directory (data.path, relative to where you run) get one written here,
# as `fleetbench data get` would: 4000 train / 1000 test digits, the mnist-5k split.
DATA_WRITERS = {"mnist": lambda out: mnist_data.write(out, mnist_data.generate(4000, 1000))}


@pytest.mark.parametrize("bench", registry.REGISTERED, ids=lambda b: b.script)
def test_every_shipped_preset_builds_with_its_scripts_config(bench, tmp_path, monkeypatch):
    """Each preset in the benchmark's presets file (shared by a model's collective and PS scripts)
    builds with the real dataclass of each script registered under that name."""
    import yaml

    cls = script_config_class(bench)
    presets = yaml.safe_load(bench.presets.read_text())
    assert isinstance(presets, dict) and "tiny" in presets, f"{bench.presets} lacks a tiny preset"
    monkeypatch.chdir(tmp_path)
    for preset in presets:
        for key, value in config.preset_overrides(bench.name, preset):
            if key == "data.path":
                assert bench.name in DATA_WRITERS and not os.path.isabs(value), \
                    f"{bench.presets.name} [{preset}]: data.path {value}: this test cannot make that data"
                DATA_WRITERS[bench.name](tmp_path / value)
        cfg = config.build(bench.name, cls, preset)
        assert type(cfg) is cls, preset
