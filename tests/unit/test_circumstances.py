"""Comparisons that name what differs (issue 44 item 6): `compare` prints, under its table and in
--json, every circumstance that differs between the sides; sides on other hardware get no
faster/slower verdict unless --across-hardware, and the output says why. Built from the committed
demo records and copies of them with one circumstance changed."""
import copy
import json
from pathlib import Path

import pytest

from fleetbench.history import circumstances
from fleetbench.report.regression import comparison
from fleetbench.store import results

DEMO = str(Path(__file__).resolve().parents[2] / "results" / "kvm-2vcpu-paddle2.6.2-demo.jsonl")


def changed_copy(tmp_path, name, edit, factor=0.8):
    """The demo's records with new ids, `edit(record)` applied and throughput x `factor`."""
    path = tmp_path / f"{name}.jsonl"
    for record in results.load(DEMO):
        record = copy.deepcopy(dict(record))
        record["id"] = name + record["id"][len(name):]
        edit(record)
        if record["metrics"] and record["metrics"].get("throughput"):
            record["metrics"]["throughput"] *= factor
        results.append(str(path), record)
    return str(path)


def _set(*keys, value):
    def edit(record):
        block = record
        for key in keys[:-1]:
            block = block.setdefault(key, {})
        block[keys[-1]] = value
    return edit


@pytest.mark.parametrize("name, edit, label, new", [
    ("amd", _set("env", "cpu", "model", value="AMD EPYC 7B13"), "CPU", "AMD EPYC 7B13"),
    ("cores", _set("env", "cpu", "usable_threads", value=8), "CPU threads", "8"),
    ("gpu", _set("env", "gpus", value=[{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920}]), "GPU",
     "NVIDIA A100-SXM4-80GB"),
])
def test_other_hardware_gets_no_verdict_and_says_why(tmp_path, capsys, name, edit, label, new):
    other = changed_copy(tmp_path, name, edit)
    assert comparison.cli([DEMO, other]) == 0  # 20 % slower everywhere, and yet not a regression
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "/s)  " in line]  # the table's rows: "cell (unit)  base ..."
    assert rows and all(line.endswith("not judged") and "SLOWER" not in line for line in rows)
    assert f"hardware differs ({label} " in out and f"→ {new}" in out
    assert "--across-hardware compares across hardware" in out
    assert f"circumstances that differ between the sides (1): {label}: base " in out
    assert f"; new {new} (hardware)" in out
    # on purpose: the verdicts are given, the difference still named
    assert comparison.cli([DEMO, other, "--across-hardware"]) == 1
    out = capsys.readouterr().out
    assert "SLOWER" in out and "not judged" not in out and f"; new {new} (hardware)" in out


@pytest.mark.parametrize("name, edit, field, value", [
    ("paddle", _set("env", "paddle", "version", value="2.6.3"), "paddle", "2.6.3"),
    ("nccl", _set("env", "paddle", "nccl", value="2.19.3"), "nccl", "2.19.3"),
    ("kernel", _set("env", "os", "kernel", value="6.1.0-18-amd64"), "kernel", "6.1.0-18-amd64"),
    ("commit", _set("git", value="f" * 40), "fleetbench", "ffffffff"),
])
def test_software_differences_are_named_and_judged_as_before(tmp_path, capsys, name, edit, field, value):
    other = changed_copy(tmp_path, name, edit)
    assert comparison.cli([DEMO, other, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["differences"] == {field: {"base": circumstances.values(results.load(DEMO))[field], "new": [value]}}
    assert report["counts"]["slower"] >= 1 and report["counts"]["hardware differs"] == 0
    assert all(cell["differs"] == report["differences"] for cell in report["cells"])


def test_the_same_records_name_no_difference(capsys):
    assert comparison.cli([DEMO, DEMO]) == 0
    out = capsys.readouterr().out
    assert "circumstances: the sides ran on the same CPU, GPU, driver" in out and "not judged" not in out


def test_every_circumstance_is_read_from_a_record():
    (record,) = results.load(DEMO)[:1]
    named = circumstances.of(record)
    assert named["cpu"] == record["env"]["cpu"]["model"] and named["paddle"] == "2.6.2"
    assert named["kernel"] == record["env"]["os"]["kernel"] and named["threads"] == "2"
    assert named["fleetbench"] == record["git"][:8] and named["network"] == "local"
    assert named["nccl"] is None and named["gpu"] is None  # a CPU run has none: said as '?'
    assert set(named) == {name for name, _ in circumstances.FIELDS}
