"""The summary line a run prints (measure/resultline), from committed records, and how a launcher
finds the record its job stored (results.job_record): by the id in the job's logs."""
import json
from pathlib import Path

import pytest
from util import REPO, kept_store, result_line

from fleetbench.measure import resultline
from fleetbench.store import results
from fleetbench.measure.repeats.stability import format_pm


def committed(mode: str, want=lambda r: True) -> dict:
    """The first successful committed record of `mode` that `want` accepts."""
    for path in sorted((REPO / "results").glob("*.jsonl")):
        for record in results.load(str(path)):
            if record["mode"] == mode and record["error"] is None and want(record):
                return record
    raise AssertionError(f"no committed {mode} record")


@pytest.mark.parametrize("mode, want, head", [
    ("collective", lambda r: r["devices_per_node"] == 2 and r["nodes"] == 1 and r["metrics"].get("mfu") is None, "1x2"),
    ("collective", lambda r: r["metrics"].get("mfu") is not None and r["world_size"] == 1, "1x1"),
    ("ps", lambda r: r["world_size"] == 2, "2/2 async"),
    ("comm", lambda r: len(r["metrics"]["ops"]) > 1, "all_reduce (first of 6 ops)"),
])
def test_the_line_is_the_records_to_its_printed_digits(mode, want, head):
    record = committed(mode, want)
    text = resultline.line(resultline.fields_of(record, "results/x.jsonl"))
    line = result_line(text, record, "results/x.jsonl")  # one line, its throughput the record's, its id
    assert f" {head}" in line.split(" | ")[0] and line.startswith(f"fleetbench result: {record['benchmark']} ")
    m = record["metrics"]
    assert ("MFU" in line) == (m.get("mfu") is not None)  # only where the record has one, never "n/a"
    assert ("| peak " in line) == bool(m.get("peak_mem_mib"))
    if mode == "ps":
        assert f"({format_pm(m['throughput_per_device'], None)} per worker)" in line
    if mode == "comm":
        top = max((r for r in m["rows"] if r["op"] == m["op"]), key=lambda r: r["bytes"])
        assert f"| algbw {format_pm(top['algbw_GBps'], None)} GB/s at " in line


def test_what_a_record_lacks_is_left_out():
    f = resultline.ResultFields(benchmark="x", preset=None, mode="collective", method="bsp", nodes=1,
                                devices_per_node=1, servers=None, workers=1, throughput=12345.678,
                                unit="samples/s", per_device=12345.678, step_time_ms=None, mfu=None,
                                peak_mem_mib=None, comm=None, store="r.jsonl", record_id="0123456789abcdef")
    assert resultline.line(f) == "fleetbench result: x 1x1 bsp | 12346 samples/s | r.jsonl id 01234567"


def test_a_barrier_alone_shows_its_latency():
    c = resultline.CommFigures(op="barrier", ops=1, busbw_GBps=None, from_bytes=None, algbw_GBps=None,
                               at_bytes=None, alpha_us=61.25)
    assert resultline._comm_parts(c) == ["latency 61.25 us"]
    assert [resultline.size_text(n) for n in (8, 4096, 3 * 2**19, 2**33)] == ["8 B", "4 KiB", "1.5 MiB", "8 GiB"]


def _log(log_dir: Path, name: str, record: dict) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / name).write_text(f"step 1/2\n{results.RESULT_PREFIX}{results.dumps(record)}\nfleetbench result: ...\n")


def test_the_job_record_is_found_by_the_id_in_its_logs_not_by_position(tmp_path):
    store = tmp_path / "r.jsonl"
    kept_store(store)
    mine, other = (json.loads(line) for line in [store.read_text()] * 2)
    other["id"] = "f" * 32
    results.append(str(store), other)  # another job appended after this one's record
    _log(tmp_path / "log" / "attempt2", "workerlog.0", mine)  # every node's and attempt's logs are read
    assert results.job_record(str(tmp_path / "log"), str(store))["id"] == mine["id"]
    # a record the logs name but the store lacks (stored elsewhere): none
    assert results.job_record(str(tmp_path / "log"), str(tmp_path / "none.jsonl")) is None
    assert results.job_record(str(tmp_path / "empty"), str(store)) is None
