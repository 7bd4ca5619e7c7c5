"""`nvidia-smi topo -m` parsing and analysis on fixtures of every output variant, plus the CLI
and detection against a real (fake-tool) subprocess."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from util import cli_code

from fleetbench.machine import topology
from fleetbench.machine.topology import (
    TopologyError,
    analyse,
    link_score,
    parse,
    parse_gpu_list,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "topo"
VALID = sorted(p.name for p in FIXTURES.glob("*.txt") if not p.name.startswith("bad_"))


def raw(name):
    return (FIXTURES / name).read_bytes().decode("utf-8")  # keep \r and escapes exactly as captured


def load(name):
    return parse(raw(name))


@pytest.mark.parametrize("name", VALID)
def test_every_fixture_gives_a_complete_symmetric_matrix(name):
    topo = load(name)
    devices = topo["gpus"] + topo["nics"]
    assert topo["gpus"] and set(topo["links"]) == set(devices)
    for a in devices:
        assert set(topo["links"][a]) == set(devices) - {a}
        for b in topo["links"][a]:
            assert topo["links"][a][b] == topo["links"][b][a]
            assert link_score(topo["links"][a][b]) > 0, (a, b, topo["links"][a][b])
    for column in ("cpu_affinity", "numa_affinity", "gpu_numa_id"):
        assert set(topo.get(column, {})) <= set(topo["gpus"]), "NIC rows have empty affinity cells"


def test_fleetx_8xv100_seed():
    topo = load("fleetx_8xv100.txt")
    assert topo["gpus"] == [f"GPU{i}" for i in range(8)] and topo["nics"] == ["mlx5_0"]
    assert topo["links"]["GPU0"]["GPU1"] == "NV2"
    assert topo["links"]["GPU0"]["GPU3"] == "NV1"
    assert topo["links"]["GPU0"]["GPU5"] == "NODE"
    assert topo["links"]["GPU0"]["mlx5_0"] == "NODE"
    assert topo["links"]["mlx5_0"]["GPU7"] == "NODE"
    assert topo["cpu_affinity"] == {f"GPU{i}": "0-23" for i in range(8)}
    assert "numa_affinity" not in topo and "nic_legend" not in topo

    analysis = analyse(topo)
    assert [c["class"] for c in analysis["link_classes"]] == ["NV2", "NV1", "NODE"]
    assert [(c["gpu_pairs"], c["gpu_nic_pairs"]) for c in analysis["link_classes"]] == [(8, 0), (8, 0), (12, 8)]
    groups = [g["gpus"] for g in analysis["nvlink_groups"]]
    # Hybrid cube-mesh: two fully connected quads plus the four cross-quad NVLink pairs.
    assert groups[:2] == [["GPU0", "GPU1", "GPU2", "GPU3"], ["GPU4", "GPU5", "GPU6", "GPU7"]]
    assert sorted(groups[2:]) == [["GPU0", "GPU4"], ["GPU1", "GPU5"], ["GPU2", "GPU6"], ["GPU3", "GPU7"]]
    assert analysis["nvlink_groups"][0]["min_nvlinks"] == 1
    assert {g: n["nics"] for g, n in analysis["nearest_nics"].items()} == {f"GPU{i}": ["mlx5_0"] for i in range(8)}


def test_nic_legend_names_nics_by_device():
    topo = load("pcie_4gpu_nic_legend.txt")
    assert topo["nics"] == ["mlx5_0", "mlx5_1"]
    assert topo["nic_legend"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert topo["links"]["GPU2"]["mlx5_1"] == "PXB" and topo["links"]["mlx5_0"]["mlx5_1"] == "SYS"
    assert "NIC0" not in json.dumps(topo["links"])
    assert topo["cpu_affinity"]["GPU3"] == "16-31,48-63"
    assert topo["numa_affinity"] == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    near = analyse(topo)["nearest_nics"]
    assert near["GPU0"] == {"nics": ["mlx5_0"], "link": "PXB"}
    assert near["GPU3"] == {"nics": ["mlx5_1"], "link": "PXB"}
    assert analyse(topo)["nvlink_groups"] == []


def test_numa_affinity_and_gpu_numa_id_with_empty_nic_cells():
    topo = load("nvl_pairs_numa_gpu_numa_id.txt")
    assert topo["nics"] == ["mlx5_0", "mlx5_1", "mlx5_bond_0"]
    assert topo["numa_affinity"] == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    assert topo["gpu_numa_id"] == {f"GPU{i}": "N/A" for i in range(4)}
    assert topo["cpu_affinity"]["GPU2"] == "32-63,96-127"
    analysis = analyse(topo)
    assert analysis["nvlink_groups"] == [{"gpus": ["GPU0", "GPU1"], "min_nvlinks": 12},
                                         {"gpus": ["GPU2", "GPU3"], "min_nvlinks": 12}]
    assert analysis["nearest_nics"]["GPU1"] == {"nics": ["mlx5_0"], "link": "PHB"}
    assert analysis["nearest_nics"]["GPU3"] == {"nics": ["mlx5_bond_0"], "link": "PIX"}


def test_ansi_escapes_and_crlf_are_ignored():
    text = raw("ansi_2gpu.txt")
    assert "\x1b[" in text and "\r\n" in text
    topo = load("ansi_2gpu.txt")
    assert topo["gpus"] == ["GPU0", "GPU1"] and topo["nics"] == ["mlx5_0"]
    assert topo["links"]["GPU1"]["mlx5_0"] == "PHB"
    assert topo["cpu_affinity"] == {"GPU0": "0-7", "GPU1": "0-7"}
    assert parse(text.replace("\x1b[4m", "").replace("\x1b[1m", "").replace("\x1b[0m", "")) == topo


def test_legend_absent_and_single_space_after_long_name():
    topo = load("no_legend_pasted.txt")
    assert topo["nics"] == ["mlx5_0", "mlx5_10"]
    assert topo["links"]["mlx5_10"]["GPU3"] == "PIX" and topo["links"]["GPU0"]["GPU1"] == "PXB"
    near = analyse(topo)["nearest_nics"]
    assert near["GPU0"]["nics"] == ["mlx5_0"] and near["GPU2"]["nics"] == ["mlx5_10"]


def test_single_gpu():
    topo = load("single_gpu.txt")
    assert topo["gpus"] == ["GPU0"] and topo["nics"] == [] and topo["links"] == {"GPU0": {}}
    assert topo["cpu_affinity"] == {"GPU0": "0-15"} and topo["gpu_numa_id"] == {"GPU0": "N/A"}
    analysis = analyse(topo, [0])
    assert analysis["nvlink_groups"] == [] and analysis["nearest_nics"] == {}
    assert analysis["selection"] == {"gpus": ["GPU0"], "worst_link": None, "worst_pair": None, "warning": None}


def test_gpus_only_no_affinity_columns():
    topo = load("gpus_only_nv4.txt")
    assert topo["nics"] == [] and set(topo) == {"gpus", "nics", "links"}
    assert analyse(topo)["nvlink_groups"] == [{"gpus": ["GPU0", "GPU1", "GPU2"], "min_nvlinks": 4}]


def test_link_ranking():
    order = ["NV12", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"]
    assert sorted(order, key=link_score, reverse=True) == order
    assert [link_score(a) > link_score(b) for a, b in zip(order, order[1:])] == [True] * 7
    assert link_score("SOC") == link_score("SYS")


@pytest.mark.parametrize("text, ids", [("0-3,6", [0, 1, 2, 3, 6]), ("5", [5]), ("2,0-1,1", [0, 1, 2]),
                                       (" 0 - 1 ", [0, 1])])
def test_gpu_list(text, ids):
    assert parse_gpu_list(text) == ids


@pytest.mark.parametrize("text", ["", "a", "3-1", "0,,1", "-1", "0-"])
def test_gpu_list_rejects(text):
    with pytest.raises(ValueError, match="expected GPU indices"):
        parse_gpu_list(text)


def test_selection_worst_link_and_warning():
    topo = load("fleetx_8xv100.txt")
    inside = analyse(topo, [0, 1, 2, 3])["selection"]
    assert inside["worst_link"] == "NV1" and inside["warning"] is None
    across = analyse(topo, parse_gpu_list("0-1,5"))["selection"]
    assert across["worst_link"] == "NODE" and across["worst_pair"] == ["GPU0", "GPU5"]
    assert "GPU0 and GPU5" in across["warning"] and "0,1,2,3 or 4,5,6,7" in across["warning"]
    sys_sel = analyse(load("nvl_pairs_numa_gpu_numa_id.txt"), [0, 1, 2])["selection"]
    assert sys_sel["worst_link"] == "SYS" and "NUMA" in sys_sel["warning"]
    assert analyse(load("pcie_4gpu_nic_legend.txt"), [0, 1])["selection"]["warning"] is None
    with pytest.raises(ValueError, match="GPU9 not in the topology"):
        analyse(topo, [0, 9])


@pytest.mark.parametrize("text, message", [
    (raw("bad_not_topology.txt"), "no header row naming GPU0"),
    (raw("bad_missing_row.txt"), "no row for GPU2"),
    ("", "no header row"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV1\n", "row GPU1 has 1 link cells for 2 devices"),
    ("\tGPU0\tGPU1\nGPU0\t X \tfast\nGPU1\tNV1\t X \n", "'fast' where a link code belongs"),
    ("\tGPU0\tGPU1\nGPU0\tNV1\tNV1\nGPU1\tNV1\t X \n", "lacks X on the diagonal"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV1\t0-3\nGPU1\tNV1\t X \n", "1 values after the links"),
    ("\tGPU0\nGPU0\t X \nGPU7\t X \n", "row 'GPU7' is not a column"),
    ("\tGPU0\nGPU0\t X \nGPU0\t X \n", "row 'GPU0' appears twice"),
])
def test_malformed_text_gets_one_line_error(text, message):
    with pytest.raises(TopologyError, match=message) as info:
        parse(text)
    assert "\n" not in str(info.value) and "expected `nvidia-smi topo -m` output" in str(info.value)


def test_cli_json_from_file(capsys):
    assert topology.cli(["--input", str(FIXTURES / "fleetx_8xv100.txt"), "--json", "--gpus", "0,5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["links"]["GPU0"]["GPU1"] == "NV2" and out["cpu_affinity"]["GPU0"] == "0-23"
    assert out["analysis"]["selection"]["worst_link"] == "NODE"
    assert set(out["analysis"]) == {"ranking", "link_classes", "nearest_nics", "nvlink_groups", "selection"}


def test_cli_text_warns(capsys):
    assert topology.cli(["--input", str(FIXTURES / "nvl_pairs_numa_gpu_numa_id.txt"), "--gpus", "1-2"]) == 0
    out = capsys.readouterr().out
    assert "worst link SYS (GPU1 - GPU2)" in out and "WARNING:" in out
    assert "NVLink-connected GPU sets: GPU0 GPU1 (>= NV12); GPU2 GPU3 (>= NV12)" in out


@pytest.mark.parametrize("args, message", [
    (["--input", str(FIXTURES / "bad_not_topology.txt")], "bad_not_topology.txt: no header row naming GPU0"),
    (["--input", "/nonexistent/topo.txt"], "/nonexistent/topo.txt: cannot read"),
    (["--input", str(FIXTURES / "fleetx_8xv100.txt"), "--gpus", "x"], "--gpus 'x': expected GPU indices"),
    (["--input", str(FIXTURES / "single_gpu.txt"), "--gpus", "0-1"], "--gpus: GPU1 not in the topology"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, args, message):
    assert cli_code(topology.cli, args) == topology.EXIT_BAD_INPUT == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("fleetbench topo: ")


def fake_nvidia_smi(directory: Path, topo_text: str | None, exit_code=0, message=""):
    """An executable `nvidia-smi` that prints a fixture for `topo -m` (the real tool's contract)."""
    (directory / "topo.txt").write_text(topo_text or "")
    script = directory / "nvidia-smi"
    body = f'/bin/cat "{directory}/topo.txt"' if topo_text is not None else f"echo '{message}'"
    script.write_text(f"#!/bin/sh\n[ \"$1\" = topo ] && {body}\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_no_nvidia_smi_means_no_topology(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert topology.detect() is None and topology.detect_for_record() is None
    assert topology.cli([]) == topology.EXIT_NO_TOPOLOGY == 3
    err = capsys.readouterr().err
    assert "no NVIDIA GPU topology available" in err and "nvidia-smi not found" in err


def test_nvidia_smi_without_gpu_means_no_topology(tmp_path, monkeypatch, capsys):
    fake_nvidia_smi(tmp_path, None, exit_code=6, message="No devices were found")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert topology.detect_for_record() is None
    assert topology.cli(["--json"]) == 3
    assert "No devices were found" in capsys.readouterr().err


def test_detect_for_record_runs_the_tool(tmp_path, monkeypatch, capsys):
    text = raw("fleetx_8xv100.txt")
    fake_nvidia_smi(tmp_path, text)
    monkeypatch.setenv("PATH", str(tmp_path))
    record = topology.detect_for_record()
    assert record["raw"] == text and record["links"]["GPU0"]["GPU5"] == "NODE"
    assert record["analysis"]["nvlink_groups"][0]["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    json.dumps(record)
    assert topology.cli(["--gpus", "4-7"]) == 0
    assert "Selected GPU4 GPU5 GPU6 GPU7: worst link NV1" in capsys.readouterr().out


def test_detect_for_record_keeps_unparsable_output(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, "GPU0 is lost; topology unavailable\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    record = topology.detect_for_record()
    assert "expected `nvidia-smi topo -m` output" in record["error"] and "GPU0 is lost" in record["raw"]


def test_fleetbench_topo_subcommand_on_this_machine():
    """Through the lead's entry point: exit 3 without nvidia-smi, 0 with a saved file."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))  # no nvidia-smi in a venv's bin
    none = subprocess.run([sys.executable, "-m", "fleetbench", "topo"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert none.returncode == 3 and none.stdout == ""
    assert none.stderr.count("\n") == 1 and "no NVIDIA GPU topology available" in none.stderr
    assert "use --input FILE" in none.stderr
    saved = subprocess.run([sys.executable, "-m", "fleetbench", "topo", "--input", FIXTURES / "fleetx_8xv100.txt",
                            "--gpus", "0-3"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert saved.returncode == 0 and saved.stderr == "", saved.stderr
    assert saved.stdout.startswith("GPUs: 8 (GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7)\nNICs: 1 (mlx5_0)\n")
    assert "Selected GPU0 GPU1 GPU2 GPU3: worst link NV1" in saved.stdout
    piped = subprocess.run([sys.executable, "-m", "fleetbench", "topo", "--input", "-", "--json"], cwd=REPO, env=env,
                           input=raw("fleetx_8xv100.txt"), capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and json.loads(piped.stdout)["links"]["GPU0"]["GPU1"] == "NV2"
