"""Slurm: the allocation's nodes, the sbatch script `fleetbench slurm` writes, and a sweep run
through it with a fake `srun` that records its argv and runs the command on this machine.

Debian's slurm-wlm could not run a slurmctld/slurmd pair here (see docs/clusters.md), so the
srun path is exercised with the fake; everything else in the chain is real: the generated
script run by bash, the sweep, one srun per node, the node agents, Paddle's launchers."""
import json
import os
import stat
import subprocess

import pytest
import yaml

from fleetbench.cluster import slurm
from fleetbench.cluster.hosts import HostsError
from util import PYTHON, REPO, env, records


@pytest.mark.parametrize("text, names", [
    ("node1", ["node1"]),
    ("gpu[01-03,07],login", ["gpu01", "gpu02", "gpu03", "gpu07", "login"]),
    ("rack[1-2]-n[8-9]", ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]),
    ("127.0.0.[1-2]", ["127.0.0.1", "127.0.0.2"]),
])
def test_compact_nodelists_expand_in_slurms_order(text, names):
    assert slurm.expand_nodelist(text) == names


def test_bad_nodelists_and_no_allocation_are_one_line():
    with pytest.raises(HostsError, match=r"bad range '3-1'"):
        slurm.expand_nodelist("n[3-1]")
    with pytest.raises(HostsError, match=r"not inside a Slurm allocation \(SLURM_JOB_NODELIST is unset\)"):
        slurm.allocation_hosts({})


def write_sweep(tmp_path, cells, repeats=1):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump({"repeats": repeats, "timeout": 300, "stall": 120, "cells": cells}))
    return spec


def fleetbench(*args, **extra):
    return subprocess.run([PYTHON, "-m", "fleetbench", *map(str, args)], cwd=REPO, env=env(**extra),
                          capture_output=True, text=True, timeout=600)


def test_the_sbatch_script_asks_for_whole_nodes_and_runs_the_sweep_through_srun(tmp_path):
    spec = write_sweep(tmp_path, [{"benchmark": "resnet50", "preset": "tiny", "nodes": [1, 2]},
                                  {"benchmark": "ctr", "preset": "tiny", "servers_workers": "2/2", "nodes": 2}],
                       repeats=3)
    out = tmp_path / "run.sbatch"
    p = fleetbench("slurm", spec, "--results", tmp_path / "r.jsonl", "--partition", "cpu", "--out", out)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert os.stat(out).st_mode & stat.S_IXUSR
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --exclusive",
                 "#SBATCH --partition=cpu", "#SBATCH --time=0-00:50:30"):  # 3 cells x 3 repeats x 300 s, +10 %, +60 s
        assert line in text.splitlines(), text
    assert f"-m fleetbench sweep {spec} --executor slurm --results {tmp_path / 'r.jsonl'}" in text
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0


def test_emulated_network_cells_are_refused_for_slurm(tmp_path):
    spec = write_sweep(tmp_path, [{"benchmark": "resnet50", "preset": "tiny", "network": "1gbe"}])
    p = fleetbench("slurm", spec)
    assert p.returncode == 2 and "`network` profiles are emulated links" in p.stderr
