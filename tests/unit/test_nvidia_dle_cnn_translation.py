"""The third held-out set (fleetbench/perfmodel/sources/nvidia_dle_cnn_translation.py): every file
loads with the record count the converter's docstring and docs/explain.md report, and every model
definition has the parameter count the example's own code builds (tools/nvidia_dle_counts/). Shape only:
nothing here predicts or compares a throughput."""
import json

import pytest

from fleetbench.perfmodel import validate
from fleetbench.store import results
from fleetbench.perfmodel import modeldef, published
from fleetbench.perfmodel.sources import nvidia_dle_layers as models
from util import REPO

REFERENCE = REPO / "results" / "reference"
RECORDS = {"dle-pytorch-resnext101": 12, "dle-pytorch-se-resnext101": 12, "dle-pytorch-efficientnet": 64,
           "dle-tf1-resnext101": 12, "dle-tf1-se-resnext101": 12, "dle-pytorch-transformer": 20,
           "dle-pytorch-gnmt": 20, "dle-tf2-efficientnet-v1": 28, "dle-tf2-efficientnet-v2": 18}
# model name in the records: (parameters, trainable tensors) the example's code builds
STATED = {"ResNeXt101-32x4d": (44_177_704, 314), "SE-ResNeXt101-32x4d": (45_251_128, 446),
          "ResNeXt101-32x4d (TF, 1001 classes)": (44_179_753, 314),
          "SE-ResNeXt101-32x4d (TF, 1001 classes)": (48_957_465, 446),
          "EfficientNet-B0": (5_288_548, 213), "EfficientNet-B4": (19_341_616, 418),
          "EfficientNet-WideSE-B0": (8_423_848, 213), "EfficientNet-WideSE-B4": (34_927_246, 418),
          "EfficientNet v2-S": (21_458_488, 452), "Transformer big (WMT14 en-de)": (210_808_832, 185),
          "GNMT v2 (WMT16 en-de)": (160_671_297, 44)}


def _load(name: str) -> list[dict]:
    return [json.loads(line) for line in (REFERENCE / f"{name}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_each_file_has_its_records_and_every_model_its_stated_parameters(name):
    records = _load(name)
    assert len(records) == RECORDS[name]
    for record in records:
        results.validate(record, name)
        source, config = record["source"], record["config"]
        assert source["name"] == name and name in validate.FITTED_TABLES  # the ranges' calibration set (manifest role fit)
        assert source["url"].startswith("https://github.com/NVIDIA/DeepLearningExamples/blob/729963dd/")
        assert source["assumed"] and source["derived"]
        params, tensors = STATED[config["model"]]
        assert modeldef.parameters(config["model_def"]) == params
        assert len(modeldef.gradients(config["model_def"], name)[0]) == tensors
    # the shape --published needs: a step time and gradient sizes for every record, no refusal
    assert len(published.adopt(records, True)) >= len(records)


@pytest.mark.parametrize("definition, stated", [
    (models.resnext(), STATED["ResNeXt101-32x4d"]), (models.resnext(se="16"), STATED["SE-ResNeXt101-32x4d"]),
    (models.resnext(classes=1001), STATED["ResNeXt101-32x4d (TF, 1001 classes)"]),
    (models.resnext(classes=1001, se="c/16"), STATED["SE-ResNeXt101-32x4d (TF, 1001 classes)"]),
    (models.efficientnet_v1(1.0, 1.0, 224), STATED["EfficientNet-B0"]),
    (models.efficientnet_v1(1.4, 1.8, 380), STATED["EfficientNet-B4"]),
    (models.efficientnet_v1(1.0, 1.0, 224, widese=True), STATED["EfficientNet-WideSE-B0"]),
    (models.efficientnet_v1(1.4, 1.8, 380, widese=True), STATED["EfficientNet-WideSE-B4"]),
    (models.efficientnet_v2_s(), STATED["EfficientNet v2-S"]),
    (models.transformer_big(), STATED["Transformer big (WMT14 en-de)"]),
    (models.gnmt(), STATED["GNMT v2 (WMT16 en-de)"])])
def test_each_definition_matches_the_count_its_code_builds_within_half_a_percent(definition, stated):
    params, tensors = stated
    assert abs(modeldef.parameters(definition) - params) <= 0.005 * params  # the rule's bound; here exact
    assert modeldef.parameters(definition) == params and len(definition["layers"]) == tensors


def test_a_cnn_definition_readies_its_last_layers_gradients_early_in_backward():
    # FLOPs by output positions: the classifier and the last stage (most bytes) are ready after a
    # small share of backward, the stem (few bytes, much compute) at its end
    sizes, ready = modeldef.gradients(models.resnext(), "resnext")
    assert ready[1] < 0.01 and ready[-1] == pytest.approx(1.0)
    half = next(i for i, _ in enumerate(sizes) if sum(sizes[:i + 1]) >= sum(sizes) / 2)
    assert ready[half] < 0.35
