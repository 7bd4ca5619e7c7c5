"""Can this Paddle use its GPUs? The readiness check of `fleetbench env --check` (docs/guide/gpu.md).

A CUDA build of Paddle carries none of NVIDIA's libraries: the 2.6.2 wheel on PyPI is built for
CUDA 11.8 / cuDNN 8.6 (its paddle/version), declares no `nvidia-*` dependency, and loads the CUDA
runtime, cuDNN, cuBLAS and NCCL with dlopen when first used (paddle/phi/backends/dynload/
dynamic_loader.cc). `import paddle` therefore succeeds on a machine without them, and the first
convolution or NCCL init fails minutes into a job. This check asks Paddle itself to load each
library, in a child process (a failed load must not take the caller with it):

- `core.cudnn_version()` loads cuDNN and returns the loaded version;
- `core.nccl_version()` loads NCCL;
- `core.get_cuda_device_count()` loads the CUDA runtime and asks the driver for devices.

A failed load raises Paddle's own "The third-party dynamic library (NAME) that Paddle depends on
is not configured correctly", so the names in the verdict are the ones Paddle's loader asked for,
whatever its version. cuBLAS is loaded only with a device context; without a GPU its load is not
tried, and the verdict says so. The verdict is one line; `problems` is pure (tested on
constructed reports).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

# Paddle's install guide, where the CUDA, cuDNN and NCCL versions of each wheel are listed.
GUIDE = "https://www.paddlepaddle.org.cn/en/install/quick"
# The oldest driver each CUDA major runs on with minor-version compatibility (NVIDIA, "CUDA
# Compatibility", table of minimum driver versions for Linux).
MIN_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13)}
MISSING_LIBRARY = re.compile(r"The third-party dynamic library \(([^)]+)\)")

PROBE = r"""
import json
out = {}
try:
    import paddle
    from paddle import version
    out["paddle"] = version.full_version
    out["cuda_built"], out["cudnn_built"] = str(version.cuda()), str(version.cudnn())
    out["compiled_with_cuda"] = paddle.is_compiled_with_cuda()
    out["pip_libraries"] = str(getattr(version, "with_pip_cuda_libraries", "OFF")).upper() == "ON"
    core = paddle.base.core if hasattr(paddle, "base") else paddle.fluid.core
except Exception as e:
    out["import"] = f"{type(e).__name__}: {e}"
else:
    if out["compiled_with_cuda"]:
        for name, call in (("cudnn", "cudnn_version"), ("nccl", "nccl_version"),
                           ("devices", "get_cuda_device_count")):
            try:
                out[name] = {"value": int(getattr(core, call)())}
            except Exception as e:
                out[name] = {"error": str(e)}
print("GPU_READY " + json.dumps(out))
"""


def probe(python: str = sys.executable, env: dict | None = None, timeout: float = 120) -> dict:
    """What the Paddle of `python` can load (PROBE's answer); {"import": why} when it cannot say."""
    try:
        p = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"import": f"the probe did not finish within {timeout:g} s"}
    lines = [line for line in p.stdout.splitlines() if line.startswith("GPU_READY ")]
    if not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()
        return {"import": f"the probe exited {p.returncode}: {tail[-1] if tail else 'no output'}"}
    report = json.loads(lines[-1][len("GPU_READY "):])
    # A load that does not throw (cuDNN's: cudnn_version() is then -1) is said in Paddle's warning
    # on stderr, with the same words and the library's name.
    report["not_loaded"] = list(dict.fromkeys(MISSING_LIBRARY.findall(p.stderr or "")))
    return report


def _version_tuple(text: str) -> tuple:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def cudnn_version(code: int) -> tuple[int, int, int]:
    """(major, minor, patch) of what cudnnGetVersion() returned (Paddle's cudnn_version() passes it
    on unchanged): cuDNN's CUDNN_VERSION is major*1000 + minor*100 + patch up to 8.x and
    major*10000 + minor*100 + patch from 9.0 on; Paddle tells them apart by `version < 9000`
    (paddle/phi/backends/gpu/gpu_resources.cc, get_cudnn_major)."""
    scale = 1000 if code < 9000 else 10000
    return code // scale, code % scale // 100, code % 100


def nccl_version(code: int) -> str:
    """'2.21.5' from what ncclGetVersion() returned (Paddle's nccl_version() passes it on): NCCL's
    code is X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before; decoded as Paddle's
    paddle/distributed/utils/nccl_utils.py get_nccl_version_str does (`ver >= 10000`)."""
    scale = 10000 if code >= 10000 else 1000
    return f"{code // scale}.{code % scale // 100}.{code % 100}"


def install_hint(report: dict) -> str:
    """What to do about missing or mismatched libraries, for this build's way of getting them:
    builds with WITH_PIP_CUDA_LIBRARIES (3.x from Paddle's index) load NVIDIA's libraries from the
    nvidia-* wheels pip installs with them; the others (the 2.6.2 wheel on PyPI) from the system."""
    if report.get("pip_libraries"):
        index = "cu" + "".join(str(v) for v in _version_tuple(report["cuda_built"])[:2])
        return (f"this build takes CUDA, cuDNN and NCCL from the nvidia-* wheels pip installs with it: reinstall it "
                f"so pip puts them back (pip install --force-reinstall paddlepaddle-gpu=={report['paddle']} -i "
                f"https://www.paddlepaddle.org.cn/packages/stable/{index}/) and unset LD_LIBRARY_PATH entries that "
                f"shadow them (Paddle's guide: {GUIDE})")
    return (f"install CUDA {report['cuda_built']}, cuDNN {report['cudnn_built']} and NCCL 2 and put their lib "
            f"folders on LD_LIBRARY_PATH (Paddle's guide: {GUIDE})")


def problems(report: dict, driver: str | None = None) -> list[str]:
    """What stops this Paddle from using GPUs, one phrase each; [] when ready (or a CPU build).
    `report` is probe()'s answer, `driver` the NVIDIA driver version nvidia-smi gave (or None)."""
    if "import" in report:
        return [f"Paddle cannot be imported ({report['import']})"]
    if not report["compiled_with_cuda"]:
        return []
    out, missing = [], []
    for key, what in (("cudnn", "cuDNN"), ("nccl", "NCCL"), ("devices", "counting GPUs")):
        error = report[key].get("error")
        if error is None:
            continue
        found = MISSING_LIBRARY.search(error)  # the library Paddle's loader failed to open
        if found:
            missing.append(found.group(1))
        else:
            out.append(f"{what} failed ({error.strip().splitlines()[0][:120]})")
    loaded, built = report["cudnn"].get("value"), _version_tuple(report["cudnn_built"])
    missing += report.get("not_loaded", [])
    if loaded is not None and loaded < 0 and not any("cudnn" in name for name in missing):
        missing.append("cuDNN (cudnn_version() is -1)")  # Paddle found none and named none
    if missing:
        out.insert(0, f"cannot load {', '.join(sorted(set(missing)))}")
    if loaded and loaded > 0 and built and cudnn_version(loaded)[0] != built[0]:
        out.append(f"loads cuDNN {'.'.join(map(str, cudnn_version(loaded)))} where it was built for {report['cudnn_built']}")
    if report["devices"].get("value") == 0:
        out.append("sees no GPU")
    major = (_version_tuple(report["cuda_built"]) or (0,))[0]
    if driver and major in MIN_DRIVER and _version_tuple(driver) < MIN_DRIVER[major]:
        floor = ".".join(f"{v:02d}" if i else str(v) for i, v in enumerate(MIN_DRIVER[major]))
        out.append(f"NVIDIA driver {driver} is older than {floor}, the oldest CUDA {major}.x runs on")
    return out


def verdict(report: dict, driver: str | None = None) -> tuple[int, str]:
    """(exit status, one line): 0 ready or a CPU build, 2 not ready."""
    if "import" in report:
        return 2, f"not ready: Paddle cannot be imported ({report['import']})"
    name = f"Paddle {report['paddle']}"
    if not report["compiled_with_cuda"]:
        return 0, f"{name} is a CPU build: no GPU library to check"
    build = f"{name} (built for CUDA {report['cuda_built']}, cuDNN {report['cudnn_built']})"
    found = problems(report, driver)
    if not found:
        gpus, cudnn = report["devices"]["value"], ".".join(map(str, cudnn_version(report["cudnn"]["value"])))
        return 0, (f"ready: {build} loads cuDNN {cudnn} and NCCL {nccl_version(report['nccl']['value'])} and sees "
                   f"{gpus} GPU(s); cuBLAS is loaded "
                   f"with the first GPU op (not tried here)")
    return 2, f"not ready: {build} {'; '.join(found)}: {install_hint(report)}"
