"""Write fleetbench/perfmodel/gradient_order.json: for each model of measure/registry.GRADIENTS, its
trainable gradients in the order backward makes them ready, each with its float32 bytes and the
share of backward FLOPs done when it is ready (perfmodel/overlap.py reads it).

    .venv/bin/python tools/gradient_order.py            # rewrite the file
    .venv/bin/python tools/gradient_order.py --check    # exit 1 if the file differs from the models

How: one forward pass of a batch of 1 through the model as its benchmark script builds it, with a
hook on every layer that owns parameters, records the order the layers run and their forward
FLOPs (2 x multiply-adds of Conv2D and Linear; 0 for norms, embeddings and the rest, which are
memory-bound). Backward runs the layers in reverse, each taking time in proportion to its FLOPs
(its input and weight gradients are each about one forward), so a parameter is ready when the
earliest layer in forward order that uses it has run backward.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import paddle  # noqa: E402

from fleetbench.perfmodel import overlap  # noqa: E402
from fleetbench.measure import config, registry  # noqa: E402


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", registry.get(name, "collective").path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model_and_input(name: str, preset: str):
    script = _script(name)
    if name == "resnet50":
        cfg = config.build(name, script.ResNet50Config, preset)
        model = paddle.vision.models.resnet50(num_classes=cfg.num_classes)  # what the script builds
        return model, (paddle.zeros([1, 3, cfg.image_size, cfg.image_size]),)
    cfg = config.build(name, script.BertConfig, preset)
    ids = paddle.ones([1, cfg.seq_len], dtype="int64")
    positions = paddle.arange(cfg.max_predictions, dtype="int64").unsqueeze(0)
    return script.BertPretraining(cfg), (ids, paddle.zeros_like(ids), positions)


def _flops(layer, inputs, output) -> float:
    if isinstance(layer, paddle.nn.Conv2D):
        kh, kw = layer.weight.shape[2:]
        per_out = 2 * layer.weight.shape[1] * kh * kw  # in channels / groups x kernel
        return float(per_out * output.numel().item())
    if isinstance(layer, paddle.nn.Linear):
        return float(2 * layer.weight.shape[0] * output.numel().item())
    return 0.0


def order(name: str, preset: str) -> list[list[float]]:
    """[[fp32 bytes, share of backward done when ready], ...] in ready order."""
    model, inputs = _model_and_input(name, preset)
    model.eval()
    runs = []  # (layer, flops) in forward order, first call of each layer only
    owners = [m for m in model.sublayers(include_self=True) if m.parameters(include_sublayers=False)]
    seen = set()

    def hook(layer, args, output):
        if id(layer) not in seen:
            seen.add(id(layer))
            runs.append((layer, _flops(layer, args, output)))

    handles = [m.register_forward_post_hook(hook) for m in owners]
    with paddle.no_grad():
        model(*inputs)
    for h in handles:
        h.remove()
    total = sum(f for _, f in runs) or 1.0
    ready, done = {}, 0.0
    for layer, flops in reversed(runs):  # backward: last forward layer first
        done += flops
        for p in layer.parameters(include_sublayers=False):
            if not p.stop_gradient:
                ready[p.name] = done / total  # later (earlier-in-forward) use overwrites: ready last
    params = [p for p in model.parameters() if not p.stop_gradient]
    rank = {p.name: i for i, p in enumerate(params)}
    tensors = sorted(params, key=lambda p: (ready.get(p.name, 1.0), -rank[p.name]))
    return [[int(p.numel().item()) * 4, round(ready.get(p.name, 1.0), 6)] for p in tensors]


def table() -> dict:
    return {f"{name} {preset}": {"tensors": order(name, preset)} for name, preset in sorted(registry.GRADIENTS)}


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_known_args(argv)[1]
    data = table()
    for key, entry in data.items():
        total = sum(b for b, _ in entry["tensors"])
        if (total, len(entry["tensors"])) != registry.GRADIENTS[tuple(key.split())]:
            print(f"{key}: {total} bytes in {len(entry['tensors'])} tensors, registry says "
                  f"{registry.GRADIENTS[tuple(key.split())]}", file=sys.stderr)
            return 1
    text = json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n"
    if "--check" in args:
        same = overlap.ORDER_FILE.exists() and overlap.ORDER_FILE.read_text() == text
        print("gradient order file " + ("matches the models" if same else "differs from the models"))
        return 0 if same else 1
    overlap.ORDER_FILE.write_text(text)
    print(f"wrote {overlap.ORDER_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
