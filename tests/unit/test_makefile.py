"""The Makefile's virtualenv holds one Paddle build (issue 26 finding 5): paddlepaddle and
paddlepaddle-gpu both install paddle/, so a .venv stamped for one extra is refused for the other
in one line, exit 2, before pip runs."""
import os
import re
import subprocess

from util import REPO


def test_a_venv_of_the_cpu_build_is_refused_for_the_gpu_extra(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-cpu").touch()
    # run as a user would, not as a sub-make of `make test` (whose MAKELEVEL makes make say make[1])
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    p = subprocess.run(["make", "-s", "install", "EXTRA=gpu", f"VENV={venv}"], cwd=REPO, capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.returncode == 2
    ours = [line for line in p.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
    assert ours == [f"make: {venv} holds the cpu build of Paddle and this host wants 'gpu' (paddlepaddle and "
                    "paddlepaddle-gpu both own paddle/): run make clean first, or give this build its own "
                    "virtualenv: make VENV=.venv-gpu install"]
    assert sorted(f.name for f in venv.iterdir()) == [".installed-cpu"]  # pip never ran
