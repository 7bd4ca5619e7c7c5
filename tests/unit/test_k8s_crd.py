"""Every PaddleJob fleetbench writes validates, strictly, against the training operator's own CRD
schema: tests/fixtures/paddlejob_crd_v1.9.0.json, a copy of kubeflow/training-operator v1.9.0
manifests/base/crds/kubeflow.org_paddlejobs.yaml (openAPIV3Schema, descriptions removed). Strict
as `kubectl apply --validate=strict`: a field the schema does not name is an error, not pruned."""
import json
import re
from pathlib import Path

import pytest
import yaml

from fleetbench.engines import k8s
from fleetbench.sweep.runner import SWEEP_DIR

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "paddlejob_crd_v1.9.0.json").read_text())
COUNT: dict = {}  # documents per preset (printed with -s, for the record)
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "number": (int, float)}


def _type_ok(schema: dict, value) -> bool:
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return kind is None or isinstance(value, TYPES[kind])


def _object_errors(schema: dict, value: dict, at: str) -> list[str]:
    props, extra = schema.get("properties"), schema.get("additionalProperties")
    out = [f"{at}.{k}: required" for k in schema.get("required", []) if k not in value]
    for key, item in value.items():
        if props is not None and key in props:
            out += errors(props[key], item, f"{at}.{key}")
        elif isinstance(extra, dict):
            out += errors(extra, item, f"{at}.{key}")
        elif props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out.append(f"{at}.{key}: unknown field")
    return out


def errors(schema: dict, value, at: str = "") -> list[str]:
    """What the schema refuses in value (the OpenAPI v3 subset CRDs use), as 'path: why' lines."""
    if not _type_ok(schema, value):
        return [f"{at}: expected {schema.get('type') or 'int-or-string'}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{at}: {value!r} not in {schema['enum']}"]
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return [f"{at}: {value!r} does not match {schema['pattern']}"]
    if isinstance(value, dict):
        return _object_errors(schema, value, at)
    if isinstance(value, list) and "items" in schema:
        return [e for i, v in enumerate(value) for e in errors(schema["items"], v, f"{at}[{i}]")]
    return []


def test_the_checker_refuses_what_the_operator_would():
    doc = {"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": {"name": "x"},
           "spec": {"runPolicy": {"suspend": "yes", "activeDeadline": 5},
                    "paddleReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [
                        {"name": "paddle", "image": "i", "resources": {"limits": {"cpu": "eight"}}}]}}}}}}
    found = errors(SCHEMA["openAPIV3Schema"], doc)
    assert any("suspend: expected boolean" in e for e in found)
    assert any("activeDeadline: unknown field" in e for e in found)
    assert any("limits.cpu" in e and "does not match" in e for e in found)


def _without_networks(path: Path, tmp_path: Path) -> Path:
    """The sweep with its emulated links dropped (k8s refuses them: a cluster's links are its own)."""
    spec = yaml.safe_load(path.read_text())
    for cell in spec.get("cells", []):
        cell.pop("network", None)
    spec.pop("hosts", None)
    copy = tmp_path / path.name
    copy.write_text(yaml.safe_dump(spec))
    return copy


def _sweep_docs(path: Path, tmp_path: Path) -> list[dict]:
    out = tmp_path / f"{path.stem}.k8s.yaml"
    rc = k8s.cli([str(_without_networks(path, tmp_path)), "--image", "registry.example/fleetbench:1",
                  "--cpu", "8", "--memory", "32Gi", "--gpus", "--out", str(out)])
    assert rc == 0, path.name
    return list(yaml.safe_load_all(out.read_text()))


@pytest.mark.parametrize("path", sorted(Path(SWEEP_DIR).glob("*.yaml")), ids=lambda p: p.stem)
def test_every_sweep_preset_validates_strictly(path, tmp_path, monkeypatch):
    # The documents' shape is under test here, not the cells' configs: `fleetbench k8s` running each
    # script's own --check is tested in test_k8s_shape.py; here it would start a Python with Paddle
    # per distinct cell (~60 s over all presets). A bad key in a shipped sweep is still refused in one
    # line by the sweep's own check before anything runs.
    monkeypatch.setattr(k8s, "_check_problem", lambda script, args: None)
    docs = _sweep_docs(path, tmp_path)
    assert docs
    COUNT[path.stem] = len(docs)
    for doc in docs:
        assert errors(SCHEMA["openAPIV3Schema"], doc) == [], doc["metadata"]["name"]
