"""The registry's gradient sizes (measure/registry.GRADIENTS) and the gradient order the overlap
model reads (perfmodel/gradient_order.json) are the Paddle models' own: each entry's model is built
from its benchmark script at that preset's config (tools/gradient_order.py, as it wrote the file),
its trainable parameters counted and one forward pass hooked. Builds BERT-Large on the CPU (1.3 GB
of parameters, a few seconds)."""
import importlib.util
import json

import pytest
from util import REPO

from fleetbench.perfmodel import overlap
from fleetbench.measure import registry

paddle = pytest.importorskip("paddle")


def _tool():
    spec = importlib.util.spec_from_file_location("gradient_order", REPO / "tools" / "gradient_order.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("key", sorted(registry.GRADIENTS))
def test_registry_gradients_and_their_order_are_the_models(key):
    tensors = _tool().order(*key)
    assert registry.gradients(*key) == (sum(b for b, _ in tensors), len(tensors))
    stored = json.loads(overlap.ORDER_FILE.read_text())[" ".join(key)]["tensors"]
    assert stored == tensors  # the file is what the models give (rewrite: tools/gradient_order.py)


def test_unknown_benchmark_or_preset_has_no_sizes():
    assert registry.gradients("resnet50", "tiny") is None
    assert registry.gradients("bert_large", None) == registry.GRADIENTS[("bert_large", "full")]
