"""fleetbench sweep: expanding sweep files, commands per node, and real resumable sweeps."""
import json
import os
import signal
import subprocess
import uuid

import pytest
import yaml
from util import PYTHON, env, records, result_line, wait_for

from fleetbench.emulate import netem
from fleetbench.hosts import remote
from fleetbench.job import failure, procs
from fleetbench.measure import contract, registry
from fleetbench.store import results
from fleetbench.sweep import runner, sweepfile

TINY = {"steps": 4, "warmup_steps": 1, "log_every": 1}  # resnet50 tiny, cut to seconds


def _spec(*cells, **top):
    return dict(top, cells=list(cells))


# ---------------------------------------------------------------------------------------------
# sweep files -> cells (pure)

def test_axes_expand_to_their_product_in_file_order():
    cells = sweepfile.expand(_spec({"benchmark": "resnet50", "preset": "tiny", "devices_per_node": [1, 2],
                                "set": {"batch_size": [4, 8]}}))
    assert [(c.devices_per_node, c.sets) for c in cells] == [
        (1, ("batch_size=4",)), (1, ("batch_size=8",)), (2, ("batch_size=4",)), (2, ("batch_size=8",))]
    assert all(c.repeats == 3 and c.mode == "collective" and c.script.endswith("collective/resnet50.py")
               for c in cells)
    assert cells[3].world_size == 2 and cells[3].label() == "resnet50 tiny collective 1x2 batch_size=8"


def test_method_network_and_top_level_knobs():
    (a, b) = sweepfile.expand(_spec({"benchmark": "resnet50", "method": "mgwfbp", "network": ["1gbe", "10gbe"],
                                 "startup": 90}, repeats=2, timeout=60))
    assert (a.network, a.nodes, a.world_size, a.repeats, a.timeout) == ("1gbe", 2, 2, 2, 60.0)
    assert (a.stall, a.startup) == (300.0, 90.0)
    assert a.sets == ("method=mgwfbp",) and a.method == "mgwfbp" and b.network == "10gbe"
    assert a.label() == "resnet50 full collective mgwfbp 2x1 net=1gbe"


def test_ps_cells_pair_servers_and_workers(tmp_path):
    (tmp_path / "parameter_server").mkdir()
    (tmp_path / "parameter_server" / "ctr.py").write_text("")
    cells = sweepfile.expand(_spec({"benchmark": "ctr", "preset": "tiny", "method": ["async", "geo"],
                                "servers_workers": ["1/1", "2/2"]}), root=tmp_path)
    assert [(c.mode, c.method, c.servers, c.workers, c.world_size) for c in cells] == [
        ("ps", "async", 1, 1, 1), ("ps", "async", 2, 2, 2), ("ps", "geo", 1, 1, 1), ("ps", "geo", 2, 2, 2)]
    assert cells[1].sets == (f"{sweepfile.METHOD_KEY['ps']}=async",) and cells[1].label() == "ctr tiny ps async 2s/2w"


@pytest.mark.parametrize("cell, fragment", [
    ({"benchmark": "resnet50", "bogus": 1}, "cells[1]: unknown key 'bogus'"),
    ({"benchmark": "nosuch"}, "no script for benchmark 'nosuch'"),
    ({"benchmark": ["resnet50"]}, "`benchmark` must name one benchmark"),
    ({"benchmark": "resnet50", "network": "40gbe"}, "network '40gbe': expected one of"),
    ({"benchmark": "resnet50", "nodes": 2}, "needs a `network` profile"),
    ({"benchmark": "resnet50", "devices_per_node": 0}, "devices_per_node 0"),
    ({"benchmark": "resnet50", "repeats": 0}, "repeats 0"),
    ({"benchmark": "resnet50", "timeout": -1}, "timeout -1"),
    ({"benchmark": "resnet50", "startup": 0}, "startup 0"),
    ({"benchmark": "resnet50", "set": ["a=1"]}, "`set` must be a mapping"),
    ({"benchmark": "resnet50", "mode": "ps", "servers_workers": "2"}, "servers_workers '2'"),
])
def test_bad_cells_name_the_cell_and_key(cell, fragment):
    with pytest.raises(sweepfile.SweepError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        sweepfile.expand(_spec(cell), "s.yaml")


def test_bad_sweep_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cells: [\n")
    with pytest.raises(sweepfile.SweepError, match="bad.yaml: not valid YAML"):
        sweepfile.load_spec(str(bad))
    bad.write_text("repeat: 3\ncells: [{benchmark: resnet50}]\n")
    with pytest.raises(sweepfile.SweepError, match="unknown key 'repeat'"):
        sweepfile.load_spec(str(bad))
    bad.write_text("cells: []\n")
    with pytest.raises(sweepfile.SweepError, match="non-empty list `cells`"):
        sweepfile.load_spec(str(bad))
    bad.write_bytes(b"\xff\xfe\x00c\x00e\x00l\x00l\x00s")  # UTF-16, say: not a YAML text file
    with pytest.raises(sweepfile.SweepError, match=r"bad.yaml: not a text file \(byte 0 is not UTF-8\)"):
        sweepfile.load_spec(str(bad))


def test_a_binary_sweep_file_is_one_line_naming_it(tmp_path, capsys):
    bad = tmp_path / "binary.yaml"
    bad.write_bytes(bytes(range(256)))
    assert runner.cli([str(bad), "--results", str(tmp_path / "r.jsonl")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"fleetbench sweep: error: {bad}: not a text file")


def test_an_unwritable_results_path_stops_the_sweep_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = _write(tmp_path, _spec({"benchmark": "resnet50", "preset": "tiny"}))
    with pytest.raises(SystemExit) as exit_:  # its parser's check
        runner.cli([spec, "--results", "/proc/forbidden/r.jsonl"])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("fleetbench sweep: error: --results /proc/forbidden/r.jsonl: cannot create files in /proc")
    assert os.listdir(tmp_path) == ["s.yaml"]  # no log directory: nothing ran


def test_network_cells_are_skipped_on_a_cuda_build_and_the_rest_runs(tmp_path, capsys, monkeypatch):
    # Issue 26 finding 4 refused the whole sweep; issue 33 finding 4: so `make demo` failed on every
    # GPU host. Now each network cell is skipped in one line with the reason, the others run. What
    # the skip reads is the installed Paddle's version module (machine.env.read_paddle), answered
    # here as a CUDA build's would be (tests/gpu_sim runs it on the simulated host).
    monkeypatch.chdir(tmp_path)
    cuda = {"version": "2.6.2", "compiled_with_cuda": True, "cuda": "11.8", "cudnn": "8.6.0"}
    monkeypatch.setattr(runner.machine_env, "read_paddle", lambda: (cuda, {}))
    spec = _write(tmp_path, _spec({"benchmark": "resnet50", "preset": "tiny", "network": "1gbe", "nodes": 2},
                                  {"benchmark": "resnet50", "preset": "tiny"}))
    assert runner.cli([spec, "--results", str(tmp_path / "r.jsonl"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].endswith(f"0/3 done, will be skipped ({runner.EMULATED_ON_CUDA})") and "skipped" not in lines[1]
    assert os.listdir(tmp_path) == ["s.yaml"]  # a dry run: nothing ran, nothing stored


def test_a_dry_run_with_trace_says_which_cells_would_run_untraced(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = _write(tmp_path, _spec({"benchmark": "comm", "preset": "tiny", "devices_per_node": 2}))
    assert runner.cli([spec, "--results", str(tmp_path / "r.jsonl"), "--dry-run", "--trace", str(tmp_path / "T")]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        f"cell 1/1 comm tiny comm 1x2: 0/3 done, not traced ({sweepfile.untraced(runner.expand(_spec({'benchmark': 'comm'}))[0], {})})"]
    assert os.listdir(tmp_path) == ["s.yaml"]  # a dry run: nothing ran, no trace directory made


def test_a_store_that_fails_during_the_sweep_is_one_line_naming_it(tmp_path):
    # What the sweep calls for a failed run: the error names the file, no traceback (the sweep's
    # command line prints it and stops, exit 1, keeping what was stored before).
    outcome = failure.Outcome(status="failed", elapsed_s=1.0, detail="worker rank 1 exited with code 3")
    identity = contract.RunIdentity(benchmark="resnet50", mode="collective", method="bsp", preset="tiny",
                                    config={}, nodes=1, devices_per_node=1, world_size=1)
    (tmp_path / "file").write_text("")
    path = str(tmp_path / "file" / "runs.jsonl")
    with pytest.raises(results.StoreError, match=f"^{path}: cannot store the failure record \\(.+\\)$"):
        failure.store_failure(path, identity, outcome)


def test_run_key_ignores_runtime_and_what_the_network_could_not_apply():
    net = netem.network_dict(netem.shaping_from(None, "1gbit", "1ms"), 2)
    net_missing = netem.network_dict(netem.shaping_from(None, "1gbit", "1ms"), 2, ["delay 1 ms: no netem"])
    k = sweepfile.run_key("b", "tiny", {"lr": 1, "runtime": {"threads": 2}}, "collective", 2, 2, net)
    assert k == sweepfile.run_key("b", "tiny", {"lr": 1}, "collective", 2, 2, net_missing)
    assert k != sweepfile.run_key("b", "tiny", {"lr": 2}, "collective", 2, 2, net)
    assert k != sweepfile.run_key("b", "tiny", {"lr": 1}, "collective", 2, 2, netem.network_dict(netem.shaping_from("10gbe"), 2))
    assert k != sweepfile.run_key("b", "tiny", {"lr": 1}, "collective", 1, 2, net)



def test_runs_under_another_paddle_are_another_experiment(tmp_path):
    # `make versions` may store both Paddles' runs of one cell in one file: a sweep under 3.3.1
    # must neither count 2.6.2's runs as done (it would skip its own) nor summarise them with its own.
    demo = os.path.join(sweepfile.REPO_ROOT, "results", "kvm-2vcpu-paddle2.6.2-demo.jsonl")
    (base,) = [r for r in records(demo) if r["benchmark"] == "resnet50" and r["world_size"] == 1][:1]
    store = tmp_path / "runs.jsonl"
    with open(store, "w") as f:
        for i, version in enumerate(["2.6.2", "2.6.2", "3.3.1"]):
            env_block = dict(base["env"], paddle=dict(base["env"]["paddle"], version=version))
            f.write(json.dumps(dict(base, id=f"run{i}", env=env_block)) + "\n")
    (cell,) = sweepfile.expand(_spec({"benchmark": "resnet50", "preset": "tiny"}, repeats=2), "s.yaml")
    counts = {}
    for version in ("2.6.2", "3.3.1", None):
        s = runner.Sweep([cell], str(store), str(tmp_path / "log"), out=open(os.devnull, "w"), paddle=version)
        s.configs[(cell.script, cell.preset, cell.sets)] = base["config"]
        counts[version] = s.plan()[0][1]
        if version == "3.3.1":
            (row,) = s.summary()
            assert row["n"] == 1 and row["paddle"].startswith("3.3.1")
    assert counts == {"2.6.2": 2, "3.3.1": 1, None: 2}  # None (a remote Python): any version, capped at repeats

def test_a_sweep_with_trace_names_the_cells_it_cannot_trace():
    """Pure: which cells --trace leaves untraced, and why (the real sweep: tests/job/test_breakdown.py)."""
    cells = sweepfile.expand(_spec({"benchmark": "resnet50", "preset": "tiny"}, {"benchmark": "comm", "preset": "tiny"},
                                   {"benchmark": "ctr", "mode": "ps", "preset": "tiny"}))
    configs = [{"measure": {"breakdown": False}}, {}, {"measure": {"breakdown": False}}]
    notes = [sweepfile.untraced(cell, config) for cell, config in zip(cells, configs)]
    assert notes[0] is None and "comm benchmark" in notes[1] and "measure.breakdown: true" in notes[2]
    assert sweepfile.untraced(cells[2], {"measure": {"breakdown": True}}) is None  # its marks are the trace


def test_progress_line():
    (cell,) = sweepfile.expand(_spec({"benchmark": "resnet50", "preset": "tiny"}))
    assert runner.progress_line(2, 5, cell, 1, 75, 130) == (
        "cell 2/5 resnet50 tiny collective 1x1 repeat 1/3 | elapsed 1m15s ETA 2m10s")
    assert runner.progress_line(1, 5, cell, 1, 0, None).endswith("elapsed 0s ETA ?")


def _state(nodes, shaping="1gbe"):
    layout = netem.plan_layout(nodes)
    return {"layout": layout.to_dict(), "created": [["netns", n.netns] for n in layout.nodes],
            "shaping": {"profile": shaping, "rate_bit": netem.PROFILES[shaping], "delay_ms": 0.0},
            "not_applied": []}


def _netns_launches(cell, state, base_env):
    """The launchers of the netns executor for one run of `cell` (as the sweep starts them)."""
    network = netem.network_dict(netem.Shaping(**state["shaping"]), cell.nodes, state["not_applied"])
    ex = remote.emulated_executor(remote.HostOptions(executor="netns"), state, "fb")
    return ex.launches(remote.cell_job(cell, "/r.jsonl"), "/L", runner.emulated_env(cell, base_env, network), "j1"), network


def test_collective_nodes_each_run_a_launcher_in_their_namespace():
    (cell,) = sweepfile.expand(_spec({"benchmark": "resnet50", "preset": "tiny", "network": "1gbe", "nodes": 2,
                                  "devices_per_node": 1}))
    launches, network = _netns_launches(cell, _state(2), {"PATH": "/bin"})
    assert [l.name for l in launches] == ["10.77.0.1", "10.77.0.2"] and network["profile"] == "1gbe"
    masters = set()
    for i, l in enumerate(launches):
        cmd = l.cmd
        assert cmd[:4] == ["ip", "netns", "exec", f"fb-node{i}"]
        flag = lambda f: cmd[cmd.index(f) + 1]
        masters.add(flag("--master"))
        assert (flag("--nnodes"), flag("--rank"), flag("--nproc_per_node"), flag("--host")) == (
            "2", str(i), "1", f"10.77.0.{i + 1}")
        assert flag("--log_dir") == f"/L/node{i}" and cmd[-2:] == ["--results", "/r.jsonl"]
        assert l.env["GLOO_SOCKET_IFNAME"] == f"fb-n{i}" and l.env["FLEETBENCH_NODES"] == "2"
        assert json.loads(l.env["FLEETBENCH_NETWORK"])["rate_gbit"] == 1.0
        assert l.env["FLEETBENCH_OMP_THREADS"] == str(max(1, __import__("fleetbench").usable_cores() // 2))
    assert len(masters) == 1 and masters.pop().startswith("10.77.0.1:")


def test_ps_servers_and_workers_spread_over_nodes(tmp_path):
    (tmp_path / "parameter_server").mkdir()
    (tmp_path / "parameter_server" / "ctr.py").write_text("")
    (cell,) = sweepfile.expand(_spec({"benchmark": "ctr", "method": "async", "servers_workers": "1/3",
                                  "network": "10gbe", "nodes": 2}), root=tmp_path)
    launches, _ = _netns_launches(cell, _state(2, "10gbe"), {})
    assert len(launches) == 2
    flag = lambda cmd, f: cmd[cmd.index(f) + 1]
    servers = flag(launches[0].cmd, "--servers").split(",")
    trainers = flag(launches[0].cmd, "--trainers").split(",")
    assert [s.split(":")[0] for s in servers] == ["10.77.0.1"]
    # contiguous per node: Paddle numbers a node's trainers from its first endpoint
    assert [t.split(":")[0] for t in trainers] == ["10.77.0.1", "10.77.0.1", "10.77.0.2"]
    assert all(flag(l.cmd, "--servers") == ",".join(servers) for l in launches)
    assert [l.env["POD_IP"] for l in launches] == ["10.77.0.1", "10.77.0.2"]
    assert flag(launches[0].cmd, "--gloo_port") == flag(launches[1].cmd, "--gloo_port")


def shipped_sweeps() -> list:
    return sorted(f for f in os.listdir(sweepfile.SWEEP_DIR) if f.endswith(".yaml"))


def test_every_shipped_sweep_expands_to_registered_benchmarks():
    """Every preset, each cell: a registered benchmark, its registered script (or a variant file
    that exists), and a preset its benchmark's presets file has. All problems are listed at once."""
    names = shipped_sweeps()
    assert "demo.yaml" in names
    problems = []
    for name in names:
        path = os.path.join(sweepfile.SWEEP_DIR, name)
        try:
            cells = sweepfile.expand(sweepfile.load_spec(path), path)
        except sweepfile.SweepError as e:
            problems.append(str(e))
            continue
        assert cells, name
        for cell in cells:
            bench = registry.BENCHMARKS.get(cell.benchmark)
            if bench is None:
                problems.append(f"{name}: {cell.label()}: {cell.benchmark!r} is not registered")
                continue
            if not os.path.isfile(cell.script):
                problems.append(f"{name}: {cell.label()}: no file {cell.script}")
            if cell.preset not in yaml.safe_load(bench.presets.read_text()):
                problems.append(f"{name}: {cell.label()}: no preset {cell.preset!r} in {bench.presets.name}")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# real sweeps

def _write(tmp_path, spec):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def _sweep_cmd(spec_path, store, *extra):
    return [PYTHON, "-m", "fleetbench", "sweep", spec_path, "--results", str(store), "--log-dir",
            os.path.join(os.path.dirname(spec_path), "log"), *extra]


@pytest.mark.job
def test_bad_config_fails_before_anything_runs(tmp_path):
    spec = _write(tmp_path, _spec({"benchmark": "resnet50", "preset": "tiny", "set": dict(TINY)},
                                  {"benchmark": "resnet50", "preset": "tiny", "set": {"bogus_key": 1}}))
    store = tmp_path / "runs.jsonl"
    p = subprocess.run(_sweep_cmd(spec, store), cwd=tmp_path, env=env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("fleetbench sweep: error: cell 2 (resnet50 tiny collective 1x1 bogus_key=1)")
    assert "bogus_key" in line and not store.exists() and not (tmp_path / "log").exists()


def _job_processes(token):
    """Live processes that inherited this test's token (the whole job, whatever its tree)."""
    return procs.job_pids(token, variable="SWEEP_TEST_TOKEN")


@pytest.mark.job
def test_interrupted_sweep_resumes_and_a_failing_cell_does_not_stop_the_others(tmp_path):
    # resnet18 tiny (a small CNN at 16 px): what is asserted is the sweep's bookkeeping, and a run of
    # it costs half a ResNet50 tiny run's CPU (make test's budget)
    first = {"benchmark": "resnet18", "preset": "tiny", "set": dict(TINY)}
    # cells told apart by log_every (not by seed: the seed is not part of a run's identity)
    failing = {"benchmark": "resnet18", "preset": "tiny", "set": dict(TINY, log_every=2), "timeout": 1}
    last = {"benchmark": "resnet18", "preset": "tiny", "set": dict(TINY, log_every=4)}
    spec = _write(tmp_path, _spec(first, failing, last, repeats=1))
    store = tmp_path / "runs.jsonl"
    token = uuid.uuid4().hex

    # 1. interrupt the sweep once the first cell is stored
    proc = subprocess.Popen(_sweep_cmd(spec, store), cwd=tmp_path, env=env(SWEEP_TEST_TOKEN=token),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: any(r["error"] is None for r in records(store)), 120), "first cell never stored"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "resume" in err
    assert _job_processes(token) == []
    (done,) = [r for r in records(store) if r["error"] is None]
    assert done["config"]["log_every"] == 1

    # 2. resume: the first cell is skipped, the failing cell fails again, the last cell runs
    p = subprocess.run(_sweep_cmd(spec, store), cwd=tmp_path, env=env(SWEEP_TEST_TOKEN=token),
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 1, p.stdout + p.stderr
    (line1,) = [l for l in p.stdout.splitlines() if l.startswith("cell 1/3 ")]
    assert line1.endswith(": 1/1 done earlier, skipped")
    assert "repeat 1/1 | elapsed" in p.stdout and "-> FAILED: timeout" in p.stdout
    assert _job_processes(token) == []
    recs = records(store)
    ok = [r for r in recs if r["error"] is None]
    assert [r["config"]["log_every"] for r in ok] == [1, 4]
    assert ok[0]["id"] == done["id"]  # not re-run
    failed = [r for r in recs if r["error"]]
    assert failed and all(r["config"]["log_every"] == 2 and "timeout" in r["error"] for r in failed)
    # the run that stored a record says its summary line (measure/resultline); the failed one none
    (said,) = [line for line in p.stdout.splitlines() if line.startswith("  -> ok in ")]
    result_line(said.split(": ", 1)[1].split(", DISTURBED (")[0], ok[1], store)
    assert p.stdout.count("fleetbench result: ") == 1
    # summary: one row per cell, mean ± std and the failures counted
    # (lines after it list the runs of unstable, outlying or disturbed cells: as the machine's load has it)
    table = [line for line in p.stdout[p.stdout.index("benchmark  preset"):].splitlines()
             if not line.startswith(("UNSTABLE: ", "outlier: ", "disturbed: "))]
    assert len(table) == 4 and "log_every=2" in table[2] and table[2].split()[8] == "0"
    # one run each: its mean alone, no spread to show (not "± 0.00"; digits: fleetbench.measure.repeats.stability)
    assert " ± " not in table[1] + table[3] and float(table[1].split()[9]) > 0


@pytest.mark.job
def test_an_interleaved_sweep_stores_its_cells_runs_in_rounds(tmp_path):
    # two mnist tiny cells (LeNet, seconds a run) told apart by log_every; the order of turns itself is
    # tests/unit/test_sweep_order.py's, this is the real runner storing real runs in that order
    spec = _write(tmp_path, _spec({"benchmark": "mnist", "preset": "tiny", "set": {"log_every": [5, 10]}},
                                  repeats=2))
    store = tmp_path / "runs.jsonl"
    p = subprocess.run(_sweep_cmd(spec, store, "--interleave"), cwd=tmp_path, env=env(), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [r for r in records(store) if r["error"] is None]
    by_time = sorted(recs, key=lambda r: r["time"])
    assert [r["config"]["log_every"] for r in by_time] == [5, 10, 5, 10]
    assert [r["id"] for r in by_time] == [r["id"] for r in recs]  # stored as they ran
    # each run's line names its own record, found by the id in its logs
    said = [line.split(" id ")[1][:8] for line in p.stdout.splitlines() if line.startswith("  -> ok in ")]
    assert said == [r["id"][:8] for r in by_time]
    progress = [line.split(" | ")[0] for line in p.stdout.splitlines() if " | elapsed" in line]
    assert [(line[:8], line[-3:]) for line in progress] == [("cell 1/2", "1/2"), ("cell 2/2", "1/2"),
                                                            ("cell 1/2", "2/2"), ("cell 2/2", "2/2")]
