"""Changes explained (issue 48 item 4, issue 44 item 6): at a change point `history` names what
changed in the circumstances between the runs before and after; cells that changed at one time
are said together; `history --regressions` lists every cell whose latest change is a slowdown,
newest first. Constructed series from a seeded generator (history/synthetic.py)."""
import datetime

import pytest

from fleetbench.history import synthetic
from fleetbench.report.regression import history_view
from fleetbench.store import cli as importer
from fleetbench.store import results, select

NCCL = {"nccl": ("2.18.3", "2.19.3")}


def trail(recs):
    return history_view.run(select.Side(given=tuple(recs), label="constructed"))


def only_change(report):
    (cell,) = report["cells"]
    (change,) = cell["changes"]
    return change


@pytest.mark.parametrize("at, runs", [(20, 40), (10, 40), (30, 40), (8, 16)])
def test_an_nccl_change_with_a_slowdown_is_found_where_it_is_and_named(at, runs):
    report = trail(synthetic.series(seed=at, runs=runs, at=at, step_pct=-12.0, changed=NCCL))
    change = only_change(report)
    assert change["at"] == at and change["verdict"] == "slower"
    # within 4 standard errors of the change (2 % noise a run, the shorter side's runs)
    assert change["change_pct"] == pytest.approx(-12.0, abs=4 * 2.0 * (2 / min(at, runs - at)) ** 0.5)
    assert change["text"] == "NCCL 2.18.3 → 2.19.3; Paddle unchanged; CUDA unchanged; driver unchanged"
    assert list(change["changed"]) == ["nccl"]
    (regression,) = report["regressions"]
    assert regression["change"] is change
    line = "\n".join(history_view.regression_lines(report))
    assert f"{change['change_pct']:+.1f}% at run" in line
    assert f"at run {at + 1} " in line and "what changed: NCCL 2.18.3 → 2.19.3" in line


@pytest.mark.parametrize("changed, text", [
    ({"driver": ("535.104.05", "550.54.14")},
     "driver 535.104.05 → 550.54.14; Paddle unchanged; NCCL unchanged; CUDA unchanged"),
    ({"paddle": ("2.6.2", "3.0.0")}, "Paddle 2.6.2 → 3.0.0; NCCL unchanged; CUDA unchanged; driver unchanged"),
    ({"kernel": ("5.15.0-91-generic", "6.1.0-18-amd64"), "cuda": ("12.0", "12.3")},
     "CUDA 12.0 → 12.3; kernel 5.15.0-91-generic → 6.1.0-18-amd64; Paddle unchanged; NCCL unchanged; "
     "driver unchanged"),
    ({}, "nothing recorded changed"),
])
def test_other_circumstances_and_none_are_named_as_they_are(changed, text):
    change = only_change(trail(synthetic.series(seed=3, at=20, step_pct=-12.0, changed=changed)))
    assert change["verdict"] == "slower" and change["text"].startswith(text)


def test_a_circumstance_changing_without_a_change_in_speed_is_no_change_point():
    report = trail(synthetic.series(seed=4, at=20, step_pct=0.0, changed=NCCL))
    assert report["cells"][0]["changes"] == [] and report["regressions"] == []


def test_cells_that_change_at_one_time_are_said_together_and_regressions_come_newest_first(tmp_path, capsys):
    early = datetime.datetime(2026, 10, 1, tzinfo=datetime.timezone.utc)
    recs = synthetic.series(seed=1, at=20, changed=NCCL, nodes=1)
    recs += synthetic.series(seed=2, at=20, changed=NCCL, nodes=2)  # the same hours: the same event
    recs += synthetic.series(seed=3, at=12, changed={"driver": ("535.104.05", "550.54.14")}, nodes=4, start=early)
    later = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
    recs += synthetic.series(seed=4, at=20, step_pct=+15.0, nodes=8, start=later)  # faster: not a regression
    report = trail(recs)
    changes = {cell["label"]: cell["changes"] for cell in report["cells"]}
    one, two = changes["resnet50 full mgwfbp 1x8 local"][0], changes["resnet50 full mgwfbp 2x8 local"][0]
    assert one["together"] == ["resnet50 full mgwfbp 2x8 local"]
    assert two["together"] == ["resnet50 full mgwfbp 1x8 local"]
    assert changes["resnet50 full mgwfbp 4x8 local"][0]["together"] == []
    # newest first: the two November changes (one event, either order), then October's
    assert [r["label"] for r in report["regressions"]][2] == "resnet50 full mgwfbp 4x8 local"
    assert {r["label"] for r in report["regressions"][:2]} == {"resnet50 full mgwfbp 1x8 local",
                                                               "resnet50 full mgwfbp 2x8 local"}
    assert report["regressions"][-1]["change"]["text"].startswith("driver 535.104.05 → 550.54.14")
    # the same from a database, as the command line prints it
    path = tmp_path / "runs.jsonl"
    for r in recs:
        results.append(str(path), r)
    url = f"sqlite:///{tmp_path / 's.db'}"
    importer.index([str(path)], url)
    assert history_view.cli(["--db", url, "--regressions"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"3 regression(s) in {url} (cells whose latest change point is a slowdown, newest first; "
                          "4 cell(s) looked at)")
    assert "together with resnet50 full mgwfbp" in out and "8x8" not in out
    assert history_view.cli(["--db", url, "--images", str(tmp_path / "img")]) == 0
    text = capsys.readouterr().out
    assert "what changed: NCCL 2.18.3 → 2.19.3; Paddle unchanged" in text
    assert "changed together with 1 other cell(s): resnet50 full mgwfbp 2x8 local" in text
