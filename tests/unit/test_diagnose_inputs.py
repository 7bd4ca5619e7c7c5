"""`fleetbench diagnose`'s bad inputs: each one line naming the flag or file and what was expected,
exit 2, before any test runs (no probe is started: node_probe and link_probe fail the test if
called). In-process: cli.cli is what `fleetbench diagnose` runs."""
import argparse
import json

import pytest

from fleetbench.diagnose import cli, session


@pytest.fixture(autouse=True)
def no_test_may_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a test ran before the input was checked")

    for name in ("measure", "probe_nodes", "probe_links", "node_probe", "link_probe"):
        monkeypatch.setattr(session, name, refuse)


def _refused(capsys, *argv) -> str:
    assert cli.cli(list(map(str, argv))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fleetbench diagnose: "), err
    return err


@pytest.mark.parametrize("metric", ["gpu_temprature_c", "matmul_gflopz"])
def test_a_misspelled_metric_is_refused_naming_it_and_the_known_ones(tmp_path, capsys, metric):
    # issue 32, acceptance 3
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"rules:\n  - metric: {metric}\n    max_value: 85\n    category: compute\n")
    err = _refused(capsys, "--rules", rules)
    assert f"{rules}: rule 1: metric '{metric}': unknown (known metrics: matmul_gflops, " in err
    assert "gpu_temperature_c" in err


def test_a_baseline_that_cannot_be_written_is_refused_before_the_diagnosis(tmp_path, capsys):
    # issue 35: it crashed with a traceback after the whole diagnosis, its result lost
    blocker = tmp_path / "file"
    blocker.write_text("")
    err = _refused(capsys, "--save-baseline", blocker / "b.json")
    assert f"--save-baseline {blocker / 'b.json'}: {blocker} is not a directory" in err
    assert f"--save-baseline {tmp_path}: is a directory, expected a file" in _refused(capsys, "--save-baseline", tmp_path)
    assert "cannot create files in /proc" in _refused(capsys, "--save-baseline", "/proc/b.json")


def test_a_results_file_with_a_corrupt_line_is_refused_not_appended_to(tmp_path, capsys):
    store = tmp_path / "diag.jsonl"
    store.write_text('{"not": "a record"\n{}\n')
    before = store.read_bytes()
    err = _refused(capsys, "--results", store)
    assert f"--results {store}:1: not a JSON record" in err
    assert store.read_bytes() == before


def test_empty_hosts_are_refused_not_a_local_diagnosis(capsys):
    assert "--hosts: host '': expected a host name" in _refused(capsys, "--hosts", "")


@pytest.mark.parametrize("argv, message", [
    (["--passes", "0"], "--passes 0: expected an integer >= 1"),
    (["--seconds", "0"], "--seconds 0: expected a number > 0"),
    (["--timeout", "-5"], "--timeout -5: expected a number > 0"),
    (["--save-baseline", "{tmp}/b.json", "--runs", "0"], "--runs 0: expected an integer >= 1"),
    (["--runs", "3"], "--runs 3: the runs a baseline is made of; give --save-baseline FILE"),
    (["--passes", "two"], "--passes 'two': expected an integer"),
    (["--concurrent", "--cluster", "x"], "--concurrent: for real hosts"),
    (["--baseline", "{tmp}/none.json"], "--baseline {tmp}/none.json: cannot read it (No such file or directory)"),
    (["--rules", "{tmp}/none.yaml"], "--rules {tmp}/none.yaml: cannot read it (No such file or directory)"),
])
def test_each_bad_option_is_named_on_its_own(tmp_path, capsys, argv, message):
    argv = [a.format(tmp=tmp_path) for a in argv]
    try:
        code = cli.cli(argv)
    except SystemExit as e:  # refused by the flag's type (fleetbench.cmdline)
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("fleetbench diagnose: "), err
    assert message.format(tmp=tmp_path) in err


def test_a_baseline_of_other_hosts_is_refused_before_any_test(tmp_path, capsys, monkeypatch):
    from fleetbench.diagnose.judging import baseline

    monkeypatch.setattr(cli, "machine", lambda: {"cpu": "X", "cpus": 2, "paddle": "2.6.2"})
    made = baseline.make_baseline([{"nodes": {0: {"matmul_gflops": 1.0}}, "links": {}, "cluster": None}],
                                  cli.machine(), ["elsewhere"])
    path = tmp_path / "b.json"
    path.write_text(json.dumps(made))
    err = _refused(capsys, "--baseline", path)  # this machine alone: host localhost
    assert "made on hosts elsewhere, this run has localhost" in err


def test_an_existing_baseline_may_be_saved_over(tmp_path):
    # the check is a file's, not a results store's: a baseline is one JSON object, not a JSONL line
    saved = tmp_path / "b.json"
    saved.write_text(json.dumps({"kind": "fleetbench-diagnose-baseline", "nodes": {}}, indent=1))
    cli._check_outputs(argparse.Namespace(results=None, save_baseline=str(saved)))
