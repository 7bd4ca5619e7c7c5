"""The simulated GPU host itself (simhost.py, facade.py, nvidia_smi.py), pinned to the sources it
stands in for: Paddle 2.6.2's and 3.3.1's installed wheels (their own Python: device detection,
ParallelEnv, the NCCL version decoder; their binaries' loader message), paddle/phi's C++ read with
the search tools (the cuDNN rule of gpu_resources.cc, the library names of dynamic_loader.cc), and
nvidia-smi's output read by fleetbench's own parsers. What the facade answers is what fleetbench
decides on, so a facade that drifted from Paddle would make every test of this tier a fiction."""
import json
import subprocess
from pathlib import Path

import pytest
import simhost
from util import PYTHON, REPO, env, paddle3_python

from fleetbench.machine import gpu_ready, nvsmi, topology

# One process per build asks its Paddle everything fleetbench and Paddle's launcher ask.
ASK = r"""
import json, os, sys
import paddle
from paddle.base import core
from paddle.distributed.launch.context.device import Device
from paddle.distributed.utils.nccl_utils import get_nccl_version_str
out = {"compiled": paddle.is_compiled_with_cuda(), "count": paddle.device.cuda.device_count(),
       "core_count": core.get_cuda_device_count(), "cuda": str(paddle.version.cuda()), "cudnn": paddle.version.cudnn(),
       "cudnn_code": core.cudnn_version(), "nccl_code": core.nccl_version(),
       "nccl_by_paddle": get_nccl_version_str(core.nccl_version()), "default": paddle.get_device(),
       "launcher": {"type": Device.parse_device().dtype, "labels": Device.parse_device().labels},
       "device_id": paddle.distributed.ParallelEnv().device_id, "bf16": paddle.amp.is_bfloat16_supported(),
       "name": paddle.device.cuda.get_device_name(), "capability": list(paddle.device.cuda.get_device_capability())}
try:
    paddle.set_device("gpu:9")
except ValueError as e:
    out["gpu9"] = str(e)
paddle.set_device("gpu:2")
x = paddle.ones([4]) * 2
paddle.seed(7)  # Paddle's own CUDA-build branch would seed CUDA generators: its internals stay CPU
conv = paddle.nn.Conv2D(3, 4, 3)(paddle.rand([1, 3, 8, 8]))
import subprocess
smi = subprocess.run(["nvidia-smi", "--query-gpu=index,clocks.sm", "--format=csv,noheader,nounits"],
                     capture_output=True, text=True).stdout
out.update(chosen=paddle.get_device(), on_cpu=x.place.is_cpu_place(), conv=list(conv.shape),
           busy=sorted(os.listdir(json.load(open(os.environ["SIMULATED_GPU_HOST"]))["state_dir"])),
           clocks=[int(line.split(",")[1]) for line in smi.splitlines()])
print("ASKED " + json.dumps(out))
"""


def ask(sim, python=PYTHON, **extra) -> dict:
    p = subprocess.run([python, "-c", ASK], cwd=REPO, env=env(**sim.env(), **extra), capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(next(line for line in p.stdout.splitlines() if line.startswith("ASKED "))[6:])


@pytest.mark.parametrize("build, python", [("2.6.2-cu118", lambda: PYTHON), ("3.3.1-cu126", paddle3_python)])
def test_paddle_answers_as_the_named_cuda_build(tmp_path, build, python):
    sim = simhost.install(tmp_path, "dgx-a100", build, python=python())
    spec = simhost.BUILDS[build]
    got = ask(sim, python(), CUDA_VISIBLE_DEVICES="1,3,5,6", FLAGS_selected_gpus="3")
    major, minor, patch = (int(x) for x in spec["cudnn"].split("."))
    assert got["compiled"] is True and got["count"] == got["core_count"] == 4  # CUDA_VISIBLE_DEVICES rules
    assert (got["cuda"], got["cudnn"]) == (spec["cuda"], spec["cudnn"])
    assert got["cudnn_code"] == simhost.cudnn_code(major, minor, patch)
    assert gpu_ready.cudnn_version(got["cudnn_code"]) == (major, minor, patch)
    assert got["nccl_by_paddle"] == spec["nccl"]  # Paddle's own decoder reads the facade's code back
    # Paddle's launcher sees the visible devices by their ids; a rank's device is FLAGS_selected_gpus
    assert got["launcher"] == {"type": "gpu", "labels": ["1", "3", "5", "6"]}
    assert got["device_id"] == 3 and got["default"] == "gpu:3"
    assert got["gpu9"].endswith("Device id must be less than GPU count, but received id is: 9. GPU count is: 4.")
    assert got["bf16"] is True and got["name"] == simhost.A100["name"] and got["capability"] == [8, 0]
    # tensors stay on the CPU, Paddle's internals take their CPU paths; nvidia-smi sees GPU 5 loaded
    assert got["chosen"] == "gpu:2" and got["on_cpu"] is True and got["conv"] == [1, 4, 6, 6]
    assert len(got["busy"]) == 1 and got["busy"][0].startswith("busy-")
    # while this process holds visible device 2 (physical 5), nvidia-smi shows it at its clocks under
    # load and the others idle: a sample taken after the load reads idle clocks (finding 7)
    assert got["clocks"] == [210] * 5 + [1410] + [210] * 2


def test_the_loader_message_is_the_one_in_paddles_binaries():
    # the format string of dynamic_loader.cc's failure (PreconditionNotMet, or a warning for cuDNN),
    # as compiled into both wheels' libraries: what gpu_ready.MISSING_LIBRARY reads Paddle by
    import facade

    template = facade.LOADER_TEXT.split("{name}")[0]
    for python in (PYTHON, paddle3_python()):
        package, _version = simhost.installed_paddle_version(python)
        libraries = [package / "base" / "libpaddle.so", *sorted((package / "libs").glob("libphi*.so"))]
        found = subprocess.run(["grep", "-l", "-a", "-F", template + "%s", *map(str, libraries)],
                               capture_output=True, text=True)
        assert found.stdout.strip(), f"{python}: {template!r} not in {libraries}"
    assert gpu_ready.MISSING_LIBRARY.search(facade.LOADER_TEXT.format(name="libcudnn.so.9", error="x")).group(1) == \
        "libcudnn.so.9"


@pytest.mark.parametrize("version, code", [((8, 6, 0), 8600), ((8, 9, 7), 8907), ((9, 0, 0), 90000),
                                           ((9, 5, 1), 90501), ((10, 1, 2), 100102)])
def test_cudnn_codes_follow_cudnn_and_paddles_decoder(version, code):
    # cudnn_version.h: CUDNN_VERSION = MAJOR*1000+MINOR*100+PATCH up to 8.x, MAJOR*10000+... from 9.0;
    # paddle/phi/backends/gpu/gpu_resources.cc (get_cudnn_major/minor) tells them apart by < 9000
    assert simhost.cudnn_code(*version) == code
    assert gpu_ready.cudnn_version(code) == version


@pytest.mark.parametrize("version, code", [((2, 8, 4), 2804), ((2, 16, 2), 21602), ((2, 21, 5), 22105)])
def test_nccl_codes_follow_nccl_and_paddles_decoder(version, code):
    # nccl.h NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z from 2.9 on;
    # paddle/distributed/utils/nccl_utils.py get_nccl_version_str decodes by >= 10000
    assert simhost.nccl_code(*version) == code
    assert gpu_ready.nccl_version(code) == ".".join(map(str, version))


def smi(sim, *args):
    return subprocess.run(["nvidia-smi", *args], env=env(**sim.env()), capture_output=True, text=True, timeout=30)


def test_nvidia_smi_lists_queries_and_draws_the_topology(tmp_path):
    dgx = simhost.install(tmp_path / "dgx", "dgx-a100", None)
    listed = smi(dgx, "-L").stdout.splitlines()
    assert len(listed) == 8 and listed[0].startswith("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-")
    rows = nvsmi.parse(smi(dgx, nvsmi.command()[1], nvsmi.command()[2]).stdout)
    assert [r["index"] for r in rows] == list(range(8)) and rows[0]["clocks.max.sm"] == 1410
    assert rows[0]["clocks.sm"] == 210  # idle: no process has selected it
    bad = smi(dgx, "--query-gpu=index,nosuch", "--format=csv")
    assert bad.returncode == 2 and 'Field "nosuch" is not a valid field to query.' in bad.stderr
    topo = topology.parse(smi(dgx, "topo", "-m").stdout)
    analysis = topology.analyse(topo, [0, 1, 2, 3, 4, 5, 6, 7])
    assert analysis["nvlink_groups"] == [{"gpus": [f"GPU{i}" for i in range(8)], "min_nvlinks": 12}]
    assert analysis["nearest_nics"]["GPU3"] == {"nics": ["mlx5_1"], "link": "PXB"}
    pcie = topology.parse(smi(simhost.install(tmp_path / "pcie", "pcie-l4", None), "topo", "-m").stdout)
    selection = topology.analyse(pcie, [0, 5])["selection"]
    assert topology.analyse(pcie)["nvlink_groups"] == [] and selection["worst_link"] == "SYS"
    assert "SYS" in selection["warning"]
    nodriver = simhost.install(tmp_path / "head", "no-gpu", "2.6.2-cu118")
    assert not Path(nodriver.root / "bin" / "nvidia-smi").exists()  # a login node: no NVIDIA tool at all
