"""The README's 8-GPU quick start on the simulated 8-GPU host (a DGX A100 answered as the 2.6.2
CUDA 11.8 build): `env --check` run verbatim, its line as the README shows it; each launched
script's `--check` run there with the block's own arguments, as `fleetbench launch` runs it before
starting ranks (refusing what this build cannot do); the block's flags parsed by launch's own parser.

The 8-rank jobs themselves do not run here: on 2 CPU cores eight ResNet50 ranks on gloo are not a
test of what fleetbench decides (tests/gpu_sim/test_sim_launch.py places 8 ranks, one a device)."""
import json
import subprocess
import sys

import simhost
from util import PYTHON, REPO, env

sys.path.insert(0, str(REPO / "tests" / "job"))
import test_docs  # noqa: E402  (the README's commands, as the docs test extracts them)

from fleetbench.hosts import launch  # noqa: E402


def gpu_block():
    _cpu, gpu = test_docs.quick_start()
    assert [c.program for c in gpu].count("fleetbench") >= 4, gpu
    return gpu


def test_the_readme_gpu_quick_start_on_the_simulated_8_gpu_host(tmp_path):
    sim = simhost.install(tmp_path / "host", "dgx-a100", "2.6.2-cu118")
    block = gpu_block()
    launched = 0
    for command in block:
        if command.program == "make" or command.subcommand == "report":
            continue  # the install (this test runs in it); report: run by test_docs on CPU records
        if command.subcommand == "env":
            proc = subprocess.run([PYTHON, "-m", "fleetbench", *command.argv[1:]], cwd=REPO,
                                  env=env(**sim.env()), capture_output=True, text=True, timeout=180)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            for line in command.output:
                assert any(test_docs.shape(line).fullmatch(p.strip()) for p in proc.stdout.splitlines()), \
                    (line, proc.stdout)
            continue
        assert command.subcommand == "launch", command.text
        args = launch.parse_argv(list(command.argv[2:]))
        check = subprocess.run([PYTHON, str(REPO / args.script), *args.script_args, "--check"], cwd=REPO,
                               env=env(**sim.env(), FLAGS_selected_gpus="0"), capture_output=True, text=True,
                               timeout=180)
        assert check.returncode == 0, f"{command.text}: {check.stderr[-2000:]}"
        config = json.loads(check.stdout.strip().splitlines()[-1])
        if args.script.endswith("resnet50.py"):  # the README says: FleetX's setup
            assert (config["image_size"], config["batch_size"], config["amp"]) == (224, 32, "off"), config
        launched += 1
    assert launched == 2
