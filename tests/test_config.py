"""Config resolution: defaults <- preset <- --set, typed, with one-line errors naming the key."""
import dataclasses

import pytest

from fleetbench.measure import config


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


def test_every_shipped_preset_resolves():
    """Each preset file in the package builds with its benchmark's real dataclass (no paddle needed)."""
    import yaml

    for path in sorted(config.PRESET_DIR.glob("*.yaml")):
        presets = yaml.safe_load(path.read_text())
        assert isinstance(presets, dict) and "tiny" in presets, f"{path} lacks a tiny preset"
