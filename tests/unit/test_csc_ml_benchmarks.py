"""CSC's ml-benchmarks table as held-out published records (sources/csc_ml_benchmarks.py): the committed
records are exactly the converter's output of the page kept beside them, and every row is a record or
is not entered for the rule's reason."""
from pathlib import Path

from fleetbench.perfmodel import manifest
from fleetbench.perfmodel.sources import csc_ml_benchmarks as csc
from fleetbench.store import results

REF = Path(__file__).resolve().parents[2] / "results" / "reference"


def test_committed_records_are_the_converters_output():
    page = (REF / "csc_ml_benchmarks_results.md").read_text()
    made = "".join(results.dumps(r) + "\n" for r in csc.convert("csc-ml-benchmarks", page))
    assert (REF / "csc-ml-benchmarks.jsonl").read_text() == made
    assert manifest.reference_tables()["csc-ml-benchmarks.jsonl"].role == "check"


def test_every_row_is_a_record_or_not_entered_by_the_rule():
    page = (REF / "csc_ml_benchmarks_results.md").read_text()
    rows = csc.rows(page)
    why = [csc.entered(r) for r in rows]
    assert len(rows) == 285 and why.count(None) == len(csc.convert("csc-ml-benchmarks", page)) == 187
    assert {w.split(":")[0] for w in why if w} == {"cluster lumi", "run_clm", "no figure (ERROR)"}


def test_eight_gpus_are_two_nodes_of_four():
    page = (REF / "csc_ml_benchmarks_results.md").read_text()
    records = csc.convert("csc-ml-benchmarks", page)
    first = next(r for r in records if r["world_size"] == 8)
    assert (first["nodes"], first["devices_per_node"], first["metrics"]["throughput"]) == (2, 4, 5502.49)
    assert first["network"]["nics"] == 4 and all(r["nodes"] == 1 for r in records if r["world_size"] <= 4)
