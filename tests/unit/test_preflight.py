"""Preflight's decisions before anything starts (fleetbench/job/preflight.py): which device lists a
host refuses (device_problem, apart from the probe so GPU/XPU answers are tested on a CPU machine:
untested here on real GPUs), and how a benchmark's own `--check` refusal becomes one line."""
import sys
import textwrap

import pytest

from fleetbench.hosts import launch
from fleetbench.job import preflight


@pytest.mark.parametrize("found, problem", [
    (None, None),  # the probe could not tell: Paddle's launcher decides
    ({"type": "gpu", "labels": [str(i) for i in range(8)]}, None),  # an 8-GPU host launches it
    ({"type": "gpu", "labels": ["0", "1", "2", "3"]}, "device(s) 4,5,6,7 not visible here (visible gpu devices: "
                                                      "0,1,2,3)"),
    ({"type": "gpu", "labels": ["2", "5"]}, "device(s) 0,1,3,4,6,7 not visible"),  # CUDA_VISIBLE_DEVICES=2,5
    ({"type": "cpu", "labels": []}, "no GPU or other device"),
])
def test_which_device_lists_each_kind_of_host_refuses(found, problem):
    got = preflight.device_problem("--gpus", launch.expand_devices("0-7"), found)
    if problem is None:
        assert got is None
    else:
        assert got.startswith("--gpus 0,1,2,3,4,5,6,7: ") and problem in got, got


def test_an_xpu_host_names_its_kind():
    got = preflight.device_problem("--xpus", "0,2", {"type": "xpu", "labels": ["0", "1"]})
    assert got == "--xpus 0,2: device(s) 2 not visible here (visible xpu devices: 0,1)"


def _script(tmp_path, body):
    path = tmp_path / "bench.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


# check_config runs the script's own --check: a tiny Python script stands for a benchmark (no Paddle).
def test_check_config_returns_the_last_json_line(tmp_path):
    script = _script(tmp_path, """
        import json, sys
        print("resolving"); print(json.dumps({"argv": sys.argv[1:]})); print(json.dumps({"final": 1}))
    """)
    assert preflight.check_config(script, ["--preset", "tiny"], {}) == {"final": 1}


def test_check_config_refusal_is_the_scripts_last_error_line(tmp_path):
    script = _script(tmp_path, """
        import sys
        print("Traceback noise", file=sys.stderr)
        print("config key 'epochs' must be >= 1 (got 0)", file=sys.stderr); sys.exit(2)
    """)
    with pytest.raises(preflight.LaunchError, match=r"^config key 'epochs' must be >= 1 \(got 0\)$"):
        preflight.check_config(script, [], {})


def test_check_config_silent_failure_names_the_script_and_code(tmp_path):
    script = _script(tmp_path, "import sys; sys.exit(3)\n")
    with pytest.raises(preflight.LaunchError, match=r"bench.py --check failed with code 3$"):
        preflight.check_config(script, [], {})
