"""The registry's gradient sizes (measure/registry.GRADIENTS) are the Paddle models' own: each
entry's model is built from its benchmark script at that preset's config and its trainable
parameters counted. Builds BERT-Large on the CPU (1.3 GB of parameters, a few seconds)."""
import importlib.util

import pytest

from fleetbench.measure import config, registry

paddle = pytest.importorskip("paddle")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", registry.get(name, "collective").path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(name: str, preset: str):
    script = _script(name)
    if name == "resnet50":
        cfg = config.build(name, script.ResNet50Config, preset)
        return paddle.vision.models.resnet50(num_classes=cfg.num_classes)  # what the script builds
    cfg = config.build(name, script.BertConfig, preset)
    return script.BertPretraining(cfg)


@pytest.mark.parametrize("key", sorted(registry.GRADIENTS))
def test_registry_gradients_are_the_models(key):
    params = [p for p in _model(*key).parameters() if not p.stop_gradient]
    assert registry.gradients(*key) == (sum(int(p.numel()) * 4 for p in params), len(params))


def test_unknown_benchmark_or_preset_has_no_sizes():
    assert registry.gradients("resnet50", "tiny") is None
    assert registry.gradients("bert_large", None) == registry.GRADIENTS[("bert_large", "full")]
