"""--predict/--validate values are checked before anything is computed (issue 22)."""
import pytest

from fleetbench.perfmodel import validate
from fleetbench.report import explain

KEYS = validate.FILTER_KEYS + validate.CHANGE_KEYS


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "fast"])
def test_bad_rate_refused(value):
    with pytest.raises(validate.SpecError, match="rate_gbit must be a number of Gbit/s above 0"):
        validate.parse_spec(f"nodes=2,rate_gbit={value}", KEYS, "--predict")


def test_good_rate_kept():
    assert validate.parse_spec("nodes=2,rate_gbit=2.5", KEYS, "--predict") == {"nodes": 2, "rate_gbit": 2.5}


@pytest.mark.parametrize("spec", ["nodes=0", "nodes=-2", "devices_per_node=x", "speed=3", "nodes="])
def test_bad_shape_or_key_refused(spec):
    with pytest.raises(validate.SpecError, match="--predict"):
        validate.parse_spec(spec, KEYS, "--predict")


def test_cli_exits_2_in_one_line(tmp_path, capsys):
    empty = tmp_path / "r.jsonl"
    empty.write_text("")
    assert explain.cli([str(empty), "--predict", "nodes=2,rate_gbit=-5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "rate_gbit" in err and "'-5'" in err


def test_scaling_curve_spec_expands_to_one_spec_per_size():
    specs = [validate.parse_spec(s, KEYS, "--predict")
             for s in validate.expand("nodes=2,4,8,network=10gbe,devices_per_node=4")]
    assert specs == [{"nodes": n, "network": "10gbe", "devices_per_node": 4} for n in (2, 4, 8)]


def test_one_size_spec_is_unchanged_and_a_stray_value_still_refused():
    assert validate.expand("nodes=3,network=1gbe") == ["nodes=3,network=1gbe"]
    with pytest.raises(validate.SpecError, match="got '4'"):
        for s in validate.expand("network=1gbe,4,nodes=2"):
            validate.parse_spec(s, KEYS, "--predict")
