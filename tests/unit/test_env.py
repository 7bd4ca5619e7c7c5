"""The environment report: schema on this machine, GPU path through a fake nvidia-smi, the
text parsers on other machines' files, and the env block in result records."""
import getpass
import ipaddress
import json
import os
import re
import socket
import stat
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import fleetbench
from fleetbench.machine import env

REPO = Path(__file__).resolve().parents[2]
PADDLE_DISTRIBUTIONS = ("paddlepaddle", "paddlepaddle-gpu")  # the cpu/cpu3/ps extras, the gpu extra
TOP_KEYS = {"python", "paddle", "nvidia_driver", "gpus", "gpu_count", "cpu", "memory", "os", "nics",
            "infiniband", "env_vars", "threads", "unavailable"}


def installed_paddle_version() -> str:
    """The version of the one Paddle distribution installed, whichever extra brought it."""
    found = {}
    for name in PADDLE_DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    assert len(found) == 1, f"expected exactly one of {', '.join(PADDLE_DISTRIBUTIONS)} installed, got {found}"
    return found.popitem()[1]


def test_collect_schema_on_this_machine():
    report = env.collect(threads=fleetbench.threads_info())  # the thread record is passed in
    assert set(report) == TOP_KEYS
    json.loads(json.dumps(report))
    missing = report["unavailable"]
    for key, value in report.items():
        if value is None:
            assert key in missing, f"{key} is null without a reason"
    assert report["paddle"]["version"] == installed_paddle_version()
    assert re.fullmatch(r"[0-9a-f]{40}", report["paddle"]["commit"])
    if report["gpus"] is None:  # this machine: no NVIDIA GPU
        assert report["gpu_count"] is None and report["nvidia_driver"] is None
        assert missing["gpus"] and missing["nvidia_driver"] == missing["gpus"]
    cpu = report["cpu"]
    assert cpu["model"] and cpu["threads"] >= cpu["cores"] >= cpu["sockets"] >= 1
    assert cpu["threads"] >= cpu["usable_threads"] >= 1
    assert report["memory"]["total_mib"] >= report["memory"]["available_mib"] > 0
    assert report["os"]["kernel"] == os.uname().release and report["os"]["name"]
    assert report["nics"] and all(n["mtu"] > 0 and n["name"] != "lo" for n in report["nics"])
    for nic in report["nics"]:
        assert nic["speed_mbps"] is not None or f"nics.{nic['name']}.speed_mbps" in missing
    assert report["env_vars"]["OMP_NUM_THREADS"] == str(report["threads"]["omp_num_threads"])


def test_no_hostname_or_user_name():
    text = json.dumps(env.collect())
    for word in (socket.gethostname(), getpass.getuser()):
        if len(word) >= 4:  # a 2-letter host name would match unrelated words
            assert not re.search(rf"\b{re.escape(word)}\b", text), word


def test_env_vars_kept_and_redacted():
    environ = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0,mlx5_1", "FLAGS_cudnn_deterministic": "1",
               "CUDA_VISIBLE_DEVICES": "0,1", "GLOG_v": "0", "PADDLE_TRAINER_ID": "1",
               "PADDLE_TRAINER_ENDPOINTS": "10.0.0.1:6170,10.0.0.2:6170", "PADDLE_MASTER": "node7:8090",
               "PADDLE_LOG_DIR": "/home/alice/log", "PADDLE_AUTH_TOKEN": "s3cret", "NCCL_API_KEY": "x",
               "HOME": "/home/alice", "AWS_SECRET_ACCESS_KEY": "y", "LD_LIBRARY_PATH": "/usr/lib"}
    kept = env.read_env_vars(environ)
    assert kept == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0,mlx5_1", "FLAGS_cudnn_deterministic": "1",
                    "CUDA_VISIBLE_DEVICES": "0,1", "GLOG_v": "0", "PADDLE_TRAINER_ID": "1",
                    "PADDLE_TRAINER_ENDPOINTS": "<redacted>", "PADDLE_MASTER": "<redacted>",
                    "PADDLE_LOG_DIR": "<redacted>", "PADDLE_AUTH_TOKEN": "<redacted>", "NCCL_API_KEY": "<redacted>"}


def write_fake_nvidia_smi(directory: Path, script_body: str):
    script = directory / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + script_body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_gpus_from_nvidia_smi(tmp_path, monkeypatch):
    rows = "".join(f"{i}, Tesla V100-SXM2-32GB, 32510, 418.39, 00000000:{0x3d + i:02X}:00.0\\n" for i in range(8))
    write_fake_nvidia_smi(tmp_path, f'case "$1" in --query-gpu=index,name,memory.total,driver_version,pci.bus_id) '
                                    f'printf "{rows}";; *) exit 2;; esac')
    monkeypatch.setenv("PATH", str(tmp_path))
    report = env.collect()
    assert report["gpu_count"] == 8 and report["nvidia_driver"] == "418.39"
    assert report["gpus"][7] == {"index": 7, "name": "Tesla V100-SXM2-32GB", "memory_mib": 32510,
                                 "pci_bus_id": "00000000:44:00.0"}
    assert not {"gpus", "gpu_count", "nvidia_driver"} & set(report["unavailable"])
    markdown = env.render_markdown(report)
    assert "- Tesla V100-SXM2-32GB (32510 MiB) x 8" in markdown and "Driver Version: 418.39" in markdown


def test_nvidia_smi_failure_and_hang_become_reasons(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert env.collect()["unavailable"]["gpus"] == "nvidia-smi not found on PATH"
    write_fake_nvidia_smi(tmp_path, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the "
                                    "NVIDIA driver.\"; exit 9")
    report = env.collect()
    assert report["gpus"] is None
    assert report["unavailable"]["gpus"] == ("nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it "
                                             "couldn't communicate with the NVIDIA driver.")
    write_fake_nvidia_smi(tmp_path, "exec /bin/sleep 30")
    monkeypatch.setattr(env, "NVIDIA_SMI_TIMEOUT_S", 0.2)
    report = env.collect()
    assert report["gpus"] is None and report["unavailable"]["gpus"] == "nvidia-smi timed out after 0.2 s"


def test_a_failing_reader_never_raises(monkeypatch):
    def broken(*_):
        raise PermissionError("/proc/cpuinfo: permission denied")
    monkeypatch.setattr(env, "read_cpu", broken)
    report = env.collect()
    assert report["cpu"] is None
    assert report["unavailable"]["cpu"] == "PermissionError: /proc/cpuinfo: permission denied"
    assert report["memory"]["total_mib"] > 0


def test_collect_does_not_import_paddle():
    """Importing paddle costs about the whole time budget of collect(); the version file is enough."""
    code = "import sys, fleetbench.machine.env as e; r = e.collect(); print(r['paddle']['version'], 'paddle' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [installed_paddle_version(), "False"]


TWO_SOCKETS = "\n\n".join(
    f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6271C CPU @ 2.60GHz\n"
    f"physical id\t: {i // 4}\nsiblings\t: 4\ncore id\t: {(i // 2) % 2}\ncpu cores\t: 2\nflags\t\t: fpu sse2"
    for i in range(8)) + "\n"


def test_parse_cpuinfo():
    assert env.parse_cpuinfo(TWO_SOCKETS) == {"model": "Intel(R) Xeon(R) Gold 6271C CPU @ 2.60GHz", "sockets": 2,
                                              "cores": 4, "threads": 8, "hypervisor": False}
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nprocessor\t: 1\nCPU part\t: 0xd0c\n"
    assert env.parse_cpuinfo(arm) == {"model": None, "sockets": None, "cores": None, "threads": 2,
                                      "hypervisor": False}


def test_read_cpu_falls_back_to_sysfs_topology(tmp_path):
    (tmp_path / "cpuinfo").write_text("processor\t: 0\n\nprocessor\t: 1\n\nprocessor\t: 2\n")
    for cpu, (package, core) in enumerate([(0, 0), (0, 1), (1, 0)]):
        topo = tmp_path / "cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{package}\n")
        (topo / "core_id").write_text(f"{core}\n")
    cpu, missing = env.read_cpu(str(tmp_path / "cpuinfo"), str(tmp_path / "no-nodes"), str(tmp_path / "cpu"))
    assert (cpu["sockets"], cpu["cores"], cpu["threads"]) == (2, 3, 3)
    assert cpu["model"] is None and set(missing) == {"cpu.model", "cpu.numa_nodes"}


def test_parse_meminfo_and_os_release():
    assert env.parse_meminfo("MemTotal:       527958960 kB\nMemFree:  1 kB\nMemAvailable:   500000000 kB\n"
                             "HugePages_Total:       0\n") == {"total_mib": 515584, "available_mib": 488281}
    assert env.parse_meminfo("") == {"total_mib": None, "available_mib": None}
    assert env.parse_os_release('NAME="CentOS Linux"\nVERSION_ID="7"\nID="centos"\n'
                                'PRETTY_NAME="CentOS Linux 7 (Core)"\n') == \
        {"name": "CentOS Linux 7 (Core)", "id": "centos", "version_id": "7"}


def test_parse_gpu_query_handles_missing_memory():
    assert env.parse_gpu_query("0, NVIDIA A100-SXM4-80GB, [N/A], 535.104.05, 00000000:07:00.0\n") == \
        [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": None, "driver": "535.104.05",
          "pci_bus_id": "00000000:07:00.0"}]


def write_tree(root: Path, files: dict):
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def test_read_nics_from_sysfs_tree(tmp_path):
    write_tree(tmp_path, {"lo/type": "772\n", "lo/mtu": "65536\n",
                          "ens1f0/type": "1\n", "ens1f0/mtu": "9000\n", "ens1f0/speed": "25000\n",
                          "ens1f0/operstate": "up\n", "ens1f0/device/vendor": "0x15b3\n",
                          "eth0/type": "1\n", "eth0/mtu": "1400\n", "eth0/speed": "-1\n", "eth0/operstate": "up\n",
                          "ifb0/type": "1\n", "ifb0/mtu": "1500\n", "ifb0/operstate": "down\n"})
    nics, missing = env.read_nics(str(tmp_path))
    assert [n["name"] for n in nics] == ["ens1f0", "eth0", "ifb0"]
    assert nics[0] == {"name": "ens1f0", "speed_mbps": 25000, "mtu": 9000, "state": "up", "driver": None,
                       "virtual": False}
    assert nics[1]["speed_mbps"] is None and nics[2]["virtual"] is True
    assert missing == {"nics.eth0.speed_mbps": "driver reports no link speed",
                       "nics.ifb0.speed_mbps": "speed not readable (virtual or down interface)"}


def test_read_infiniband_from_sysfs_tree(tmp_path):
    assert env.read_infiniband(str(tmp_path / "absent")) == []
    write_tree(tmp_path, {"mlx5_0/hca_type": "MT4115\n", "mlx5_0/fw_ver": "12.28.2006\n",
                          "mlx5_0/ports/1/rate": "100 Gb/sec (4X EDR)\n", "mlx5_0/ports/1/state": "4: ACTIVE\n",
                          "mlx5_0/ports/1/phys_state": "5: LinkUp\n", "mlx5_0/ports/1/link_layer": "InfiniBand\n",
                          "mlx5_1/hca_type": "MT4123\n", "mlx5_1/device/net/ens2f0/mtu": "9000\n",
                          "mlx5_1/ports/1/rate": "25 Gb/sec (1X EDR)\n", "mlx5_1/ports/1/state": "1: DOWN\n",
                          "mlx5_1/ports/1/link_layer": "Ethernet\n"})
    devices = env.read_infiniband(str(tmp_path))
    assert devices[0] == {"device": "mlx5_0", "hca_type": "MT4115", "fw_ver": "12.28.2006", "netdevs": [],
                          "ports": [{"port": 1, "rate": "100 Gb/sec (4X EDR)", "rate_gbit": 100.0, "state": "ACTIVE",
                                     "phys_state": "LinkUp", "link_layer": "InfiniBand"}]}
    assert devices[1]["netdevs"] == ["ens2f0"] and devices[1]["ports"][0]["state"] == "DOWN"
    assert devices[1]["ports"][0]["link_layer"] == "Ethernet" and devices[1]["ports"][0]["phys_state"] is None


def test_fleetbench_env_subcommand():
    """`fleetbench env --json` through the lead's entry point: valid JSON, GPU fields null with a
    reason on a machine without nvidia-smi, CPU/memory/NIC filled."""
    path_without_gpu_tools = os.path.dirname(sys.executable)
    run = subprocess.run([sys.executable, "-m", "fleetbench", "env", "--json"], cwd=REPO, capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, PATH=path_without_gpu_tools))
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert set(report) == TOP_KEYS
    assert report["gpus"] is None and report["unavailable"]["gpus"] == "nvidia-smi not found on PATH"
    assert report["cpu"]["threads"] >= 1 and report["memory"]["total_mib"] > 0 and report["nics"]
    markdown = subprocess.run([sys.executable, "-m", "fleetbench", "env", "--markdown"], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    assert markdown.returncode == 0
    assert "## GPU Environment" in markdown.stdout and "## CPU Environment" in markdown.stdout
    both = subprocess.run([sys.executable, "-m", "fleetbench", "env", "--json", "--markdown"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and both.stderr == "fleetbench env: error: --markdown: not allowed with --json (expected one of them)\n"


def test_result_records_carry_env_and_topology():
    from fleetbench.machine import stamp
    from fleetbench.measure import contract
    from fleetbench.store import results

    record = stamp.record(contract.RunIdentity(benchmark="resnet50", mode="collective",
                                               method="allreduce", preset="tiny",
                                               config={"batch_size": 2}, nodes=1, devices_per_node=1,
                                               world_size=1), None, "env block test")
    results.validate(record)
    assert set(record["env"]) == TOP_KEYS and record["env"]["cpu"]["threads"] >= 1
    assert record["env"]["threads"] == fleetbench.threads_info()  # stamp reads the process's thread record
    assert env.collect()["threads"] is None  # collect itself reads no package root
    if record["env"]["gpus"] is None:
        assert record["topology"] is None


# ---------------------------------------------------------------- nothing that names a machine or a person's files

# Planted in the environment of the processes below: values of variables the env block keeps
# (FLAGS_, NCCL_, GLOG_, PADDLE_, GLOO_, FLEETBENCH_) that name a machine or a directory.
PLANTED = {"NCCL_PLANTED_MAC": "aa:bb:cc:dd:ee:0f", "NCCL_PLANTED_MAC_DASHES": "AA-BB-CC-DD-EE-0F",
           "GLOO_PLANTED_V4": "10.1.2.3", "PADDLE_PLANTED_ENDPOINTS": "10.1.2.3:6170,10.1.2.4:6170",
           "FLAGS_planted_v6": "fe80::a00:27ff:fe4e:66a1", "FLAGS_planted_v6_loopback": "::1",
           "FLEETBENCH_PLANTED_V6_PORT": "[fd00::1]:6170", "GLOG_planted_scoped_v6": "fe80::1%eth0",
           "PADDLE_PLANTED_REPO_PATH": str(REPO / "data"), "GLOG_planted_home": "/home/alice/log",
           "NCCL_PLANTED_IFNAMES": "eth0,10.0.0.2"}
KEPT = {"NCCL_SOCKET_IFNAME": "eth0", "FLAGS_planted_flag": "phi::DenseTensor"}  # name no machine: kept
MAC = re.compile(r"\b[0-9a-f]{2}([:-])[0-9a-f]{2}(?:\1[0-9a-f]{2}){4}\b", re.IGNORECASE)
IPV4 = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
PERSONAL_DIRS = re.compile(r"(?<![\w.])/(?:root|home|work|tmp|Users)\b")


def addresses_and_paths(text: str) -> list:
    """Every MAC address, IPv4/IPv6 address and personal or checkout path found in `text`."""
    found = [m.group(0) for m in MAC.finditer(text)] + IPV4.findall(text)
    for word in re.findall(r"[0-9A-Fa-f:.%\w]*:[0-9A-Fa-f:.%\w]*", text):
        try:
            ipaddress.ip_address(word)
            found.append(word)
        except ValueError:
            pass
    found += PERSONAL_DIRS.findall(text)
    for path in {str(REPO), str(Path.home()), os.getcwd(), sys.prefix}:
        if len(path) > 1 and path in text:
            found.append(path)
    return found


def test_the_scan_finds_what_it_looks_for():
    """The scan below can fail: each planted value is found in plain text."""
    for value in PLANTED.values():
        assert addresses_and_paths(json.dumps({"v": value})), value
    assert addresses_and_paths(json.dumps({"v": "phi::DenseTensor 2.6.2 eth0 mlx5_0 18:04"})) == []


def broken_nvidia_smi(directory: Path) -> Path:
    """A `nvidia-smi` on PATH that cannot be executed (bad interpreter): the OSError names its path."""
    directory.mkdir()
    write_fake_nvidia_smi(directory, "")
    script = directory / "nvidia-smi"
    script.write_text("#!/nonexistent/interpreter\n")
    return directory


def assert_identifies_nothing(report: dict):
    assert addresses_and_paths(json.dumps(report)) == [], addresses_and_paths(json.dumps(report))
    assert {k: report["env_vars"][k] for k in PLANTED} == dict.fromkeys(PLANTED, "<redacted>")
    assert {k: report["env_vars"][k] for k in KEPT} == KEPT
    assert report["unavailable"]["gpus"].startswith("nvidia-smi could not run: ")


def test_fleetbench_env_stores_no_mac_ip_or_path(tmp_path):
    tools = broken_nvidia_smi(tmp_path / "bin")
    run = subprocess.run([sys.executable, "-m", "fleetbench", "env", "--json"], cwd=REPO, capture_output=True,
                         text=True, timeout=60,
                         env=dict(os.environ, **PLANTED, **KEPT, PATH=f"{tools}:{os.path.dirname(sys.executable)}"))
    assert run.returncode == 0, run.stderr
    assert_identifies_nothing(json.loads(run.stdout))


def test_a_stored_records_env_block_holds_no_mac_ip_or_path(tmp_path, monkeypatch):
    from fleetbench.machine import stamp
    from fleetbench.measure import contract
    from fleetbench.store import results

    for name, value in {**PLANTED, **KEPT}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{broken_nvidia_smi(tmp_path / 'bin')}:{os.path.dirname(sys.executable)}")
    record = stamp.record(contract.RunIdentity(benchmark="resnet50", mode="collective",
                                               method="allreduce", preset="tiny",
                                               config={"batch_size": 2}, nodes=1, devices_per_node=1,
                                               world_size=1), None, "env block test")
    store = tmp_path / "r.jsonl"
    results.append(str(store), record)
    (stored,) = [json.loads(line) for line in store.read_text().splitlines()]
    assert_identifies_nothing(stored["env"])
