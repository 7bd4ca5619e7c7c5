"""A simulated GPU host for the test suite: `install(dir, host, build)` writes one, `SimHost.env()`
is what a process needs to run on it.

What a process on the simulated host sees:
- `nvidia-smi` on PATH (bin/nvidia-smi, answered by nvidia_smi.py from the host description):
  `-L`, `topo -m` (an NVSwitch node with NICs, or a PCIe one) and `--query-gpu` (clocks,
  temperatures, ECC, memory; the clocks and temperature of a device some process has selected
  are its under-load figures, the others idle ones). A host without a driver has no nvidia-smi.
- a Paddle that answers the device queries as the named CUDA build would (facade.py, installed by
  site/sitecustomize.py through PYTHONPATH): `is_compiled_with_cuda`, the device counts under
  CUDA_VISIBLE_DEVICES, `paddle.version` (a version module in that build's form), `cudnn_version()`
  and `nccl_version()` in Paddle's encodings, a missing library with Paddle's own text.
- SIMULATED_GPU_HOST: the description's path (no FLEETBENCH_ name: fleetbench forwards those from a
  job's head to its hosts, and each host is its own). fleetbench's environment report marks every
  record made under it as simulated (machine/env.py): nothing made here may pass for a GPU figure.

Tensors stay on the CPU and collectives on gloo: what is tested on it is what fleetbench decides
(readiness, refusals, ranks per node, each rank's device, what runs where), never a GPU figure.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLACEMENT = str(HERE / "placement.py")  # a rank that says where it runs (no Paddle, no record)
SIM_VARIABLE = "SIMULATED_GPU_HOST"

# GPU models: what nvidia-smi says of them. Clocks in MHz (max = the boost clock nvidia-smi
# reports as clocks.max.sm), temperatures in C; `load_*` are the figures under load.
A100 = {"name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920, "capability": [8, 0], "max_sm": 1410,
        "max_mem": 1593, "idle_sm": 210, "load_sm": 1410, "idle_temp": 31, "load_temp": 58}
V100 = {"name": "Tesla V100-SXM2-32GB", "memory_mib": 32768, "capability": [7, 0], "max_sm": 1530,
        "max_mem": 877, "idle_sm": 135, "load_sm": 1530, "idle_temp": 35, "load_temp": 61}
L4 = {"name": "NVIDIA L4", "memory_mib": 23034, "capability": [8, 9], "max_sm": 2040, "max_mem": 6251,
      "idle_sm": 210, "load_sm": 2040, "idle_temp": 38, "load_temp": 66}

# Hosts: GPUs, how they are joined, the RDMA NICs and the driver. `sockets` splits GPUs and NICs
# into two NUMA nodes.
HOSTS = {
    "dgx-a100": {"gpu": A100, "count": 8, "topology": "nvswitch", "nics": 4, "driver": "535.104.05"},
    "v100-nvlink": {"gpu": V100, "count": 8, "topology": "nvswitch", "nics": 2, "driver": "525.85.12"},
    "pcie-l4": {"gpu": L4, "count": 8, "topology": "pcie", "nics": 2, "driver": "535.104.05"},
    "a100x2": {"gpu": A100, "count": 2, "topology": "nvswitch", "nics": 1, "driver": "535.104.05"},
    "no-gpu": {"gpu": None, "count": 0, "topology": None, "nics": 0, "driver": None},
}

# Builds: what paddle.version says and which libraries Paddle's loader asks for, by name, as in
# paddle/phi/backends/dynload/dynamic_loader.cc: without WITH_PIP_CUDA_LIBRARIES (the 2.6.2 wheel
# on PyPI) the unversioned libcudnn.so / libnccl.so; with it (3.x builds from Paddle's index,
# whose NVIDIA libraries come as nvidia-* wheels) libcudnn.so.9 for CUDA >= 12.3 and the list
# "libnccl.so;libnccl.so.2". `loads` is what the host's loader finds (None: missing).
BUILDS = {
    "2.6.2-cu118": {"paddle": "2.6.2", "cuda": "11.8", "cudnn": "8.6.0", "nccl": "2.16.2", "pip_libraries": False,
                    "libraries": {"cudnn": "libcudnn.so", "nccl": "libnccl.so"},
                    "loads": {"cudnn": "8.6.0", "nccl": "2.16.2"}},
    "3.3.1-cu126": {"paddle": "3.3.1", "cuda": "12.6", "cudnn": "9.5.1", "nccl": "2.21.5", "pip_libraries": True,
                    "libraries": {"cudnn": "libcudnn.so.9", "nccl": "libnccl.so;libnccl.so.2"},
                    "loads": {"cudnn": "9.5.1", "nccl": "2.21.5"}},
}


def describe(host: str, build: str | None, state_dir: str, *, loads: dict | None = None,
             gpu_overrides: dict | None = None, count: int | None = None) -> dict:
    """The host description nvidia_smi.py and facade.py read. `loads` replaces the build's found
    libraries (a version, or None: missing); `gpu_overrides` {index: {field: value}} makes one
    device differ (a throttling GPU, ECC errors)."""
    spec = HOSTS[host]
    n = spec["count"] if count is None else count
    gpus = []
    for i in range(n):
        gpu = dict(spec["gpu"], index=i, uuid=f"GPU-5e0c{i:04x}-0000-4000-8000-{host.encode().hex()[:12]:0<12}",
                   pci_bus_id=f"00000000:{0x07 + 0x10 * i:02X}:00.0", ecc_corrected=0, ecc_uncorrected=0,
                   socket=0 if i < max(1, n // 2) else 1)
        gpu.update((gpu_overrides or {}).get(i, {}))
        gpus.append(gpu)
    desc = {"host": host, "driver": spec["driver"], "gpus": gpus, "topology": spec["topology"],
            "nics": [f"mlx5_{k}" for k in range(spec["nics"])], "state_dir": state_dir, "build": None}
    if build:
        desc["build"] = dict(copy.deepcopy(BUILDS[build]), name=build)
        desc["build"]["loads"].update(loads or {})
    return desc


@dataclasses.dataclass
class SimHost:
    root: Path
    description: dict

    @property
    def path(self) -> Path:
        return self.root / "host.json"

    @property
    def python(self) -> Path:
        """A Python that runs on this host (the node's interpreter, for --remote-python)."""
        return self.root / "bin" / "python"

    def env(self, base: dict | None = None) -> dict:
        """The variables a process on this host has: the simulated nvidia-smi first on PATH (a
        host without a driver has none), the facade on PYTHONPATH, the description's path."""
        base = dict(os.environ if base is None else base)
        path = [p for p in base.get("PATH", "").split(os.pathsep) if p and p != str(self.root / "bin")]
        pythonpath = [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(HERE / "site")]
        return {"PATH": os.pathsep.join([str(self.root / "bin"), *path]),
                "PYTHONPATH": os.pathsep.join([str(HERE / "site"), *pythonpath]),
                SIM_VARIABLE: str(self.path)}


def install(root, host: str, build: str | None = "2.6.2-cu118", python: str = sys.executable, **options) -> SimHost:
    """Write a simulated host into `root`: host.json, bin/nvidia-smi (unless the host has no
    driver), bin/python (this interpreter on the host) and, for a build, the overlay holding
    its paddle/version module."""
    root = Path(root)
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "state").mkdir(exist_ok=True)
    desc = describe(host, build, str(root / "state"), **options)
    if build:
        desc["overlay"] = str(write_version_overlay(root / "overlay", desc["build"], python))
    sim = SimHost(root, desc)
    sim.path.write_text(json.dumps(desc, indent=1))
    smi = root / "bin" / "nvidia-smi"
    if desc["driver"]:
        _script(smi, f"#!{python} -I\nimport runpy, sys\nsys.argv[0] = 'nvidia-smi'\n"
                     f"runpy.run_path({str(HERE / 'nvidia_smi.py')!r}, run_name='__main__')\n")
    elif smi.exists():
        smi.unlink()
    _script(sim.python, f'#!/bin/sh\n# this interpreter on the simulated host {host}\n'
                        f'PATH="{root / "bin"}:$PATH"\nPYTHONPATH="{HERE / "site"}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
                        f'{SIM_VARIABLE}="{sim.path}"\nexport PATH PYTHONPATH {SIM_VARIABLE}\nexec {python} "$@"\n')
    return sim


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def installed_paddle_version(python: str) -> tuple[Path, str]:
    """(the paddle package directory, its version) of `python`, without importing paddle."""
    import subprocess

    code = ("import importlib.util, os; s = importlib.util.find_spec('paddle'); "
            "print(list(s.submodule_search_locations)[0])")
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    text = (Path(out) / "version" / "__init__.py").read_text()
    return Path(out), re.search(r"^full_version\s*=\s*'([^']+)'", text, re.M).group(1)


def write_version_overlay(overlay: Path, build: dict, python: str) -> Path:
    """overlay/paddle/version/__init__.py: the installed wheel's own version module with the
    values a CUDA build of it carries (cuda_version, cudnn_version, nccl_version on 3.x,
    with_pip_cuda_libraries), so `paddle.version` answers in that build's own form. The wheel
    under it must be the named build's version: a 2.6.2 facade over a 3.3.1 wheel is refused."""
    package, version = installed_paddle_version(python)
    if version != build["paddle"]:
        raise ValueError(f"build {build['name']} is Paddle {build['paddle']}, but {python} has Paddle {version}")
    text = (package / "version" / "__init__.py").read_text()
    major, minor, patch = (int(x) for x in build["nccl"].split("."))
    values = {"cuda_version": build["cuda"], "cudnn_version": build["cudnn"],
              "nccl_version": str(nccl_code(major, minor, patch)),
              "with_pip_cuda_libraries": "ON" if build["pip_libraries"] else "OFF"}
    for name, value in values.items():
        text = re.sub(rf"^({name}\s*=\s*)'[^']*'", lambda m: f"{m.group(1)}{value!r}", text, flags=re.M)
    target = overlay / "paddle" / "version"
    target.mkdir(parents=True, exist_ok=True)
    (target / "__init__.py").write_text(text)
    return overlay / "paddle"


def nccl_code(major: int, minor: int, patch: int) -> int:
    """NCCL's NCCL_VERSION_CODE (nccl.h): X*10000+Y*100+Z from 2.9 on, X*1000+Y*100+Z before;
    what ncclGetVersion, and so Paddle's core.nccl_version(), returns."""
    return major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch


def cudnn_code(major: int, minor: int, patch: int) -> int:
    """cuDNN's CUDNN_VERSION (cudnn_version.h), what cudnnGetVersion() and so Paddle's
    core.cudnn_version() return: major*1000+minor*100+patch up to 8.x, major*10000+minor*100+patch
    from 9.0 on (Paddle's gpu_resources.cc decodes by `version < 9000`)."""
    return major * 10000 + minor * 100 + patch if major >= 9 else major * 1000 + minor * 100 + patch


def placements(log_dir) -> dict:
    """{global rank: the rank's PLACEMENT line, with its log's path} from every rank log under
    log_dir (the nodes' too: LOG_DIR/node<i>/workerlog.<j>)."""
    out = {}
    for log in Path(log_dir).rglob("workerlog.*"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("PLACEMENT "):
                got = json.loads(line[len("PLACEMENT "):])
                out[int(got["env"]["PADDLE_TRAINER_ID"])] = dict(got, log=str(log.relative_to(log_dir)))
    return out
