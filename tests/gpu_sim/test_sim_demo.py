"""`make demo` on a simulated GPU host (issue 33, finding 4: the Makefile installs the gpu extra there,
and the demo sweep's emulated-network cells made the runner refuse the whole sweep).

A reduced form of the demo, said here: the demo sweep's own cells (fleetbench/presets/sweeps/
demo.yaml), each axis at its first value, one repeat and no until-stable repeats, and of those the
first ResNet50 cell and the emulated-network cells only (the full demo takes 15 minutes on 2 quiet
cores); then `make demo`'s report. The network cells are skipped, each in one line with the reason;
the ResNet50 cell runs on the simulated GPU (the sweep runs its `--check` first: the README's
`resnet50.py --preset tiny --check` on the 2.6.2 build) and its record says it was simulated. A
neighbour holds GPU 0 meanwhile: the run's interference names it, and the report says the run was
disturbed."""
import os
import subprocess
from pathlib import Path

import simhost
import yaml
from util import PYTHON, REPO, env, records

from fleetbench.sweep import runner
from fleetbench.sweep.sweepfile import SWEEP_DIR


def reduced_demo() -> dict:
    spec = yaml.safe_load(Path(SWEEP_DIR, "demo.yaml").read_text())
    cells = []
    for cell in spec["cells"]:
        cell = {k: (v[0] if isinstance(v, list) else v) for k, v in cell.items()
                if k not in ("until_stable", "target_ci", "max_repeats")}
        if cell.get("network") or (cell["benchmark"] == "resnet50" and not cells):
            cells.append(cell)
    # the ResNet50 cell's run cut to a few steps and no warm-up run before it: which cells run and how
    # they are skipped is what is asserted (the demo's window of 5 s and its unrecorded warm-up run
    # were two-thirds of this test's 68 CPU seconds)
    cells[0] = dict(cells[0], set={"steps": 4, "warmup_steps": 1})
    # stall 240, not the demo's 60: the demo's limit is for a stuck run on a machine the demo has to
    # itself; beside four other test sessions (load ~6 on 2 cores) this ResNet50 rank took over 60 s
    # to its first step line and the sweep stopped it (a fresh clone, 2026-11-29)
    return dict(spec, repeats=1, cells=cells, warmup_run=False, stall=240)


# Another user's process holding GPU 0 (a context on it, as nvidia-smi --query-compute-apps lists it).
NEIGHBOUR = "import paddle, sys; paddle.set_device('gpu:0'); print('holding', flush=True); sys.stdin.read()"


def test_the_demo_sweep_skips_its_network_cells_in_one_line_each_and_runs_the_rest(tmp_path):
    sim = simhost.install(tmp_path / "host", "dgx-a100", "2.6.2-cu118")
    spec, store = tmp_path / "demo.yaml", tmp_path / "demo.jsonl"
    spec.write_text(yaml.safe_dump(reduced_demo()))
    assert [bool(c.get("network")) for c in reduced_demo()["cells"]] == [False, True, True, True]
    neighbour = subprocess.Popen([PYTHON, "-c", NEIGHBOUR], env=env(**sim.env()), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
    try:
        assert neighbour.stdout.readline() == "holding\n"  # its context is on GPU 0 before the sweep starts
        p = subprocess.run([PYTHON, "-m", "fleetbench", "sweep", str(spec), "--results", str(store), "--log-dir",
                            str(tmp_path / "log")], cwd=REPO, env=env(**sim.env()), capture_output=True, text=True,
                           timeout=600)
    finally:
        neighbour.communicate(timeout=60)  # stdin closed: it ends
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    skipped = [line for line in p.stdout.splitlines() if ": skipped (" in line]
    assert len(skipped) == 3 and all(line.endswith(f": skipped ({runner.EMULATED_ON_CUDA})") for line in skipped)
    assert all("net=" in line for line in skipped)
    said_again = [line for line in p.stdout.splitlines() if line.startswith("skipped cell ")]  # at the end
    assert len(said_again) == 3 and all(line.endswith(runner.EMULATED_ON_CUDA) for line in said_again)
    (rec,) = records(store)
    assert rec["error"] is None and rec["benchmark"] == "resnet50" and rec["network"] is None
    # it trained on the GPU Paddle's launcher selected for it (its tensors on the CPU), and says so
    assert rec["config"]["runtime"]["device"] == "gpu:0" and rec["env"]["simulated_gpu"]["host"] == "dgx-a100"
    assert rec["env"]["paddle"]["simulated"] is True and rec["env"]["gpus"][0]["name"] == simhost.A100["name"]
    # the neighbour on its GPU is the run's interference (machine/gpu_procs.py), and disturbs it
    assert rec["metrics"]["interference_gpu_procs"] == 1
    report = subprocess.run([PYTHON, "-m", "fleetbench", "report", str(store), "--images", str(tmp_path / "images")],
                            cwd=REPO, env=env(**sim.env()), capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    assert "SIMULATED GPU host (2.6.2 CUDA 11.8 (simulated)" in report.stdout  # never a GPU measurement
    # a lone disturbed run has no stability verdict: the stability line says so (it was a TypeError)
    assert "no stability verdict: its one run was disturbed" in report.stdout
    assert "1 other GPU process(es)" in report.stdout


def make_dry_run(sim, *args):
    """The commands `make ARGS` would run on the simulated host (its nvidia-smi first on PATH),
    run as a user would (not as a sub-make of `make test`)."""
    env_ = {k: v for k, v in env(**sim.env()).items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    p = subprocess.run(["make", "-n", *args], cwd=REPO, env=env_, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [line for line in p.stdout.splitlines() if "pip install" in line and " -e " in line]


def test_make_demo_and_make_test_install_the_cpu_build_on_a_gpu_host_unless_asked(tmp_path):
    # PyPI's CUDA build (paddlepaddle-gpu==2.6.2) needs CUDA 11.8 and cuDNN 8.6: on a current host
    # every demo cell was refused, so a GPU host gets the CPU demo, and the GPU build when asked
    sim = simhost.install(tmp_path / "host", "dgx-a100", None)
    assert subprocess.run(["nvidia-smi", "-L"], env=env(**sim.env()), capture_output=True, text=True,
                          timeout=60).stdout.startswith("GPU 0: NVIDIA A100")
    venvs = [f"VENV={tmp_path / 'venv'}", f"VENV3={tmp_path / 'venv3'}"]
    assert make_dry_run(sim, "demo", *venvs)[-1].endswith('-m pip install --quiet -e ".[cpu,test]"')
    # `make test` makes the two side by side (make -j2): in either order
    assert sorted(line.split()[-1] for line in make_dry_run(sim, "test", *venvs)) == ['".[cpu,test]"', '".[cpu3,test]"']
    assert make_dry_run(sim, "demo", "EXTRA=gpu", *venvs)[-1].endswith('-e ".[gpu,test]"')
    bad = subprocess.run(["make", "-s", "install", "EXTRA=cuda", *venvs], cwd=REPO, capture_output=True, text=True,
                         timeout=60, env={k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS")})
    assert bad.returncode == 2 and bad.stderr.splitlines()[0].startswith(
        "make: EXTRA=cuda: expected cpu (the default) or gpu"), bad.stderr
    assert not (tmp_path / "venv").exists()
