"""--predict/--validate values are checked before anything is computed (issue 22)."""
import pytest

from fleetbench.analysis import predict
from fleetbench.report import explain

KEYS = predict.FILTER_KEYS + predict.CHANGE_KEYS


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "fast"])
def test_bad_rate_refused(value):
    with pytest.raises(predict.SpecError, match="rate_gbit must be a number of Gbit/s above 0"):
        predict.parse_spec(f"nodes=2,rate_gbit={value}", KEYS, "--predict")


def test_good_rate_kept():
    assert predict.parse_spec("nodes=2,rate_gbit=2.5", KEYS, "--predict") == {"nodes": 2, "rate_gbit": 2.5}


@pytest.mark.parametrize("spec", ["nodes=0", "nodes=-2", "devices_per_node=x", "speed=3", "nodes="])
def test_bad_shape_or_key_refused(spec):
    with pytest.raises(predict.SpecError, match="--predict"):
        predict.parse_spec(spec, KEYS, "--predict")


def test_cli_exits_2_in_one_line(tmp_path, capsys):
    empty = tmp_path / "r.jsonl"
    empty.write_text("")
    assert explain.cli([str(empty), "--predict", "nodes=2,rate_gbit=-5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "rate_gbit" in err and "'-5'" in err
