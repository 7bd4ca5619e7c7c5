"""`fleetbench diagnose`'s bad inputs: each one line naming the flag or file and what was expected,
exit 2, before any test runs (no probe is started: node_probe and link_probe fail the test if
called). In-process: cli.cli is what `fleetbench diagnose` runs."""
import pytest

from fleetbench.diagnose import cli, run


@pytest.fixture(autouse=True)
def no_test_may_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a test ran before the input was checked")

    monkeypatch.setattr(run, "node_probe", refuse)
    monkeypatch.setattr(run, "link_probe", refuse)
    monkeypatch.setattr(cli, "node_probe", refuse, raising=False)
    monkeypatch.setattr(cli, "link_probe", refuse, raising=False)


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
