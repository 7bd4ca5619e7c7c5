"""tools/deps.sh as a user who is not root, on a machine missing some packages: `id` and `dpkg-query`
answered by stand-ins on PATH (the script's logic is what is tested; the real install runs in
make test, and on a new machine in tools/fresh_machine.sh)."""
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def deps(tmp_path, set_name, installed, uid=1000):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    cases = " | ".join(installed) or "__none__"
    (bin_dir / "dpkg-query").write_text(
        f'#!/bin/sh\nfor last; do :; done\ncase "$last" in {cases}) echo "install ok installed";; esac\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(REPO / "tools" / "deps.sh"), set_name], capture_output=True, text=True,
                          env=env, timeout=60)


TEST_SET = ["libgomp1", "openssh-server", "openssh-client", "slurm-wlm", "slurm-client", "munge", "iperf3",
            "iproute2", "chromium", "chromium-driver", "postgresql"]


@pytest.mark.parametrize("installed, rc, said", [
    (["libgomp1", "iproute2"], 0, ""),  # nothing missing: silent
    (["libgomp1"], 0, "emulated-network cells will be skipped; 'sudo make demo' runs them"),
    (["iproute2"], 1, "Paddle needs libgomp1 (not installed): run 'sudo make deps-demo'"),
    ([], 1, "sudo apt-get install libgomp1 iproute2"),
])
def test_the_demo_without_root_runs_what_it_can_and_names_what_it_cannot(tmp_path, installed, rc, said):
    p = deps(tmp_path, "demo", installed)
    assert p.returncode == rc and p.stdout == ""
    assert said in p.stderr and len(p.stderr.strip().splitlines()) == (1 if said else 0), p.stderr


def test_the_tests_without_root_and_a_package_missing_name_it_in_one_line(tmp_path):
    p = deps(tmp_path, "test", [name for name in TEST_SET if name != "munge"])
    assert p.returncode == 1 and "run 'sudo apt-get install munge'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    (tmp_path / "all").mkdir()
    everything = deps(tmp_path / "all", "test", TEST_SET)
    assert everything.returncode == 0 and everything.stderr == ""


def test_an_unknown_set_is_refused(tmp_path):
    p = deps(tmp_path, "everything", [])
    assert p.returncode == 2 and "everything: expected demo or test" in p.stderr
