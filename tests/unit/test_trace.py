"""Step breakdown arithmetic (train/phases.py) and Chrome traces (train/trace.py): the parts add
up, peers' waits, clocks zeroed at the barrier, the file checked against the trace format's schema."""
import json
import math

import pytest
from util import chrome_trace_problems

from fleetbench.measure import metrics
from fleetbench.train import phases, trace

MAIN, OTHER = 1, 2  # thread ids


class Clock:
    """A clock a test moves by hand."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def run_steps(offset: float, steps: int = 3, warmup: int = 1, comm_in_backward: bool = True) -> phases.Phases:
    """A rank's phases of `steps` steps of 100 ms (reader 5, forward 20, backward 40, then either
    an optimizer of 30 with 10 ms of all-reduce inside backward, or 10 ms of all-reduce after
    backward and an optimizer of 20; 5 ms unexplained), its clock starting at `offset`."""
    clock = Clock(offset)
    ph = phases.Phases(warmup, clock=clock)
    ph.thread = MAIN
    for step in range(1, steps + 1):
        start = clock.now
        ph.begin(step, start)
        ph.spans.append(("reader", start, start + 0.005, step, MAIN))
        ph.spans.append(("forward", start + 0.005, start + 0.025, step, MAIN))
        ph.spans.append(("backward", start + 0.025, start + 0.065, step, MAIN))
        comm = (start + 0.050, start + 0.060) if comm_in_backward else (start + 0.065, start + 0.075)
        ph.spans.append(("comm", *comm, step, MAIN))
        ph.spans.append(("optimizer", start + (0.065 if comm_in_backward else 0.075), start + 0.095, step, MAIN))
        clock.now = start + 0.100
        ph.end()
    return ph


@pytest.mark.parametrize("inside", [True, False])
def test_parts_add_up_to_the_step(inside):
    ph = run_steps(50.0, comm_in_backward=inside)
    steps, spans = ph.measured()
    assert [s[0] for s in steps] == [2, 3]  # warm-up left out
    parts = phases.step_parts(steps, spans, MAIN)
    ms = {k: round(1000 * v / 2, 6) for k, v in parts.items()}
    # backward's wall time less the all-reduce inside it: the parts tile the step
    assert ms["backward"] == (30.0 if inside else 40.0)
    assert ms["comm"] == 10.0 and ms["comm_blocking"] == 10.0
    assert ms["comm_in_backward"] == (10.0 if inside else 0.0)
    assert ms["other"] == 5.0
    assert math.isclose(sum(ms[p] for p in phases.PARTS) + ms["other"], ms["step"])


def test_communication_on_another_thread_is_not_blocking():
    ph = run_steps(0.0)
    ph.spans = [(n, s, e, st, OTHER if n == "comm" else t) for n, s, e, st, t in ph.spans]
    parts = phases.step_parts(*ph.measured(), MAIN)
    assert parts["comm"] > 0 and parts["comm_blocking"] == 0.0


def test_waits_are_time_beyond_the_least_in_each_call():
    # rank 1 reached call 0 late (rank 0 waited 30 ms there) and call 1 early (it waited 5 ms)
    assert phases.waits([[0.040, 0.010], [0.010, 0.015]]) == pytest.approx([0.030, 0.005])
    assert all(math.isnan(w) for w in phases.waits([[0.01], [0.01, 0.02]]))  # no common schedule


def test_breakdown_record_block_flags_parts_that_do_not_add_up():
    ph = run_steps(0.0)
    block = phases.breakdown(ph, metrics.Alone(), 0)
    row = block["ranks"][0]
    assert block["units"] == "ms per measured step" and block["steps"] == 2 and block["adds_up"]
    assert row["step"] == pytest.approx(100.0) and row["covered"] == pytest.approx(0.95)
    ph.spans = [s for s in ph.spans if s[0] != "optimizer"]  # 35 ms of 100 unexplained
    assert not phases.breakdown(ph, metrics.Alone(), 0)["adds_up"]


def test_trace_events_line_up_ranks_at_the_barrier():
    # two ranks whose clocks differ by 1000 s; each zero is its own clock at the barrier
    docs = []
    for rank, offset in ((0, 5.0), (1, 1005.0)):
        ph = run_steps(offset + 2.0)
        docs.append(trace.document(trace.events(ph.steps, ph.spans, rank, offset, ph.thread, ph.warmup_steps),
                                   {"rank": rank}))
    for rank, doc in enumerate(docs):
        assert chrome_trace_problems(doc) == []
        assert {e["pid"] for e in doc["traceEvents"]} == {rank}
    first = [[(e["name"], e["ts"], e["dur"]) for e in d["traceEvents"] if e["ph"] == "X"] for d in docs]
    assert first[0] == first[1]  # same moments since the barrier on both ranks
    steps = [e for e in docs[0]["traceEvents"] if e["name"].startswith("step ")]
    assert [(e["ts"], e["dur"], e["cat"]) for e in steps] == [(2e6, 1e5, "warmup"), (2.1e6, 1e5, "step"),
                                                               (2.2e6, 1e5, "step")]


def test_parts_nest_inside_their_step_and_other_threads_get_tracks():
    ph = run_steps(0.0, steps=1, warmup=0)
    ph.spans.append(("comm", 0.06, 0.07, 1, OTHER))
    events = trace.events(ph.steps, ph.spans, 3, 0.0, ph.thread, 0)
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {"steps", "thread 1"}
    timed = [e for e in events if e["ph"] == "X"]
    assert timed[0]["name"] == "step 1"  # the step first, then what it holds
    assert all(timed[0]["ts"] <= e["ts"] and e["ts"] + e["dur"] <= timed[0]["ts"] + timed[0]["dur"] + 1e-6
               for e in timed)


def test_schema_refuses_what_viewers_cannot_read():
    assert chrome_trace_problems({"traceEvents": [{"name": "x", "ph": "X", "pid": 0, "tid": 0, "ts": 1}]})
    assert chrome_trace_problems({"traceEvents": [{"name": "x", "ph": "B", "pid": 0, "tid": 0, "ts": 1}]})
    assert chrome_trace_problems({"events": []})


def test_write_is_whole_and_named_per_rank(tmp_path):
    names = [trace.file_name("resnet50", 1764264000123.0, r) for r in (0, 1)]
    assert names == ["resnet50-20251127T172000-123-rank0.trace.json", "resnet50-20251127T172000-123-rank1.trace.json"]
    path = tmp_path / "sub" / names[0]
    trace.write(str(path), trace.document([{"name": "s", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1}], {}))
    assert json.loads(path.read_text())["displayTimeUnit"] == "ms"
    assert [p.name for p in path.parent.iterdir()] == [names[0]]  # no temporary left


def test_the_html_page_links_each_runs_traces(tmp_path):
    from fleetbench.report import html

    kept = tmp_path / "T" / "resnet50-x-rank0.trace.json"
    kept.parent.mkdir()
    kept.write_text("{}")
    gone = str(tmp_path / "T" / "resnet50-x-rank1.trace.json")
    traced = {"id": "abcdef0123456789", "benchmark": "resnet50", "preset": "tiny", "method": "mgwfbp", "world_size": 2,
              "time": "2026-11-27T19:39:17.022+00:00", "metrics": {"trace_files": [str(kept), gone]}}
    untraced = dict(traced, id="0" * 16, metrics={"throughput": 1.0})
    text = html.traces_section([untraced, traced], lambda p: f"../{p.rsplit('/', 1)[-1]}")
    assert text.count("| abcdef01 |") == 1 and "0000000" not in text
    assert "[rank 0](../resnet50-x-rank0.trace.json)" in text and f"rank 1 (gone: `{gone}`)" in text
    page = html.page("t", text, str(tmp_path))
    assert '<a href="../resnet50-x-rank0.trace.json">rank 0</a>' in page
    assert html.traces_section([untraced], str) == ""


def test_launch_hands_its_trace_flag_to_the_script(tmp_path):
    from fleetbench.hosts import launch

    args = launch.parse_argv(["--nproc_per_node", "2", "--trace", str(tmp_path / "T"), "s.py", "--preset", "tiny"])
    assert args.script_args == ["--preset", "tiny", "--trace", str(tmp_path / "T")]
    assert launch.parse_argv(["s.py", "--trace", "T"]).script_args == ["--trace", "T"]  # the script's own, untouched
    with pytest.raises(launch.LaunchError, match="--trace: given both"):
        launch.parse_argv(["--trace", str(tmp_path), "s.py", "--trace", "T"])
    (tmp_path / "file").write_text("")
    with pytest.raises(launch.LaunchError, match="--trace"):
        launch.parse_argv(["--trace", str(tmp_path / "file"), "s.py"])


def test_a_loop_that_does_not_feed_the_phases_keeps_nothing():
    ph = phases.Phases(0)
    with ph.span("forward"):
        pass
    ph.add("comm", 1.0, 2.0)
    assert ph.spans == [] and ph.measured() == ([], [])


@pytest.mark.ps  # a parameter-server script's --check: Paddle 3.x refuses the family first
@pytest.mark.parametrize("script, sets, refused", [
    ("parameter_server/ctr.py", ["--set", "measure.breakdown=false"], "expected measure.breakdown true"),
    ("parameter_server/word2vec.py", ["--set", "measure.breakdown=false"], "expected measure.breakdown true"),
    ("parameter_server/ctr.py", [], None),
    ("parameter_server/word2vec.py", ["--set", "measure.breakdown=true"], None),
])
def test_a_ps_trace_without_its_marks_is_one_line_before_anything_runs(tmp_path, script, sets, refused):
    """--check is what `fleetbench launch` and sweeps run first: a PS trace is the marks' spans, so
    --trace turns the marks on (off by default: their cost, config.MeasureConfig) unless the
    command line turned them off."""
    import subprocess
    from util import PYTHON, REPO, env

    p = subprocess.run([PYTHON, str(REPO / script), "--preset", "tiny", *sets, "--trace", str(tmp_path / "T"),
                        "--check"], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    if refused is None:
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout.strip().splitlines()[-1])["measure"]["breakdown"] is True
        without = subprocess.run([PYTHON, str(REPO / script), "--preset", "tiny", "--check"], cwd=tmp_path, env=env(),
                                 capture_output=True, text=True, timeout=120)
        assert json.loads(without.stdout.strip().splitlines()[-1])["measure"]["breakdown"] is False
        return
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and refused in lines[0] and "--trace" in lines[0], p.stderr
    assert not (tmp_path / "T").exists()
