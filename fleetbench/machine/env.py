"""Environment report saved with every result: software versions, GPUs, CPU, memory, OS, NICs, IB.

`collect()` is called once per benchmark run, so it must be fast and must never raise: every
field it cannot read is null and `unavailable` says why, keyed by the field's dotted path
(e.g. {"gpus": "nvidia-smi not found on PATH"}). No hostname, user name, MAC or IP address or path
is recorded, so result files can be published.
"""
import importlib.util
import ipaddress
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping

from fleetbench import cmdline
# Without persistence mode the driver initialises every GPU on each nvidia-smi call: seconds on an
# 8-GPU node (NVIDIA's driver persistence docs); 1.2 s dropped the GPU list there.
# It runs once per record, not per step, so a generous bound costs nothing on a healthy host.
NVIDIA_SMI_TIMEOUT_S = 15.0
GPU_QUERY = "index,name,memory.total,driver_version,pci.bus_id"
ENV_PREFIXES = ("FLAGS_", "NCCL_", "GLOG_", "PADDLE_", "GLOO_", "FLEETBENCH_")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


# The simulated GPU host of the test suite (tests/gpu_sim/simhost.py) names its description here:
# every record made under it says so (`simulated_gpu`), and its Paddle build is a simulated one.
SIMULATED_GPU = "SIMULATED_GPU_HOST"
SIMULATED_WHAT = ("simulated GPU host: nvidia-smi and Paddle's device queries answered from a description; tensors "
                  "on the CPU, collectives on gloo; no figure made here is a GPU measurement")
# Not stored: credentials (by name) and values that identify machines or people (addresses, paths).
SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|KEY|AUTH)(_|$)", re.IGNORECASE)
# a path, an IPv4 address, a port, a MAC address (aa:bb:.. or AA-BB-..); IPv6 is found by ipaddress
IDENTIFYING_VALUE = re.compile(r"/|\b\d{1,3}(\.\d{1,3}){3}\b|:\d{2,5}\b|"
                               r"\b[0-9a-f]{2}([:-])[0-9a-f]{2}(\2[0-9a-f]{2}){4}\b", re.IGNORECASE)


# ---------------------------------------------------------------- pure parsers (tested on text)

def parse_cpuinfo(text: str) -> dict:
    """Model, sockets, physical cores and hardware threads from /proc/cpuinfo."""
    procs = [dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in block.splitlines()))
             for block in text.split("\n\n") if "processor" in block]
    model = next((p["model name"] for p in procs if p.get("model name")), None)
    sockets = {p["physical id"] for p in procs if "physical id" in p}
    cores = {(p["physical id"], p["core id"]) for p in procs if "physical id" in p and "core id" in p}
    return {"model": model, "sockets": len(sockets) or None, "cores": len(cores) or None,
            "threads": len(procs) or None,
            "hypervisor": bool(procs) and "hypervisor" in procs[0].get("flags", "").split()}


def parse_meminfo(text: str) -> dict:
    kib = {k: int(v.split()[0]) for k, _, v in (ln.partition(":") for ln in text.splitlines())
           if v.strip() and v.split()[0].isdigit()}
    return {"total_mib": kib["MemTotal"] // 1024 if "MemTotal" in kib else None,
            "available_mib": kib["MemAvailable"] // 1024 if "MemAvailable" in kib else None}


def parse_os_release(text: str) -> dict:
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return {"name": values.get("PRETTY_NAME") or values.get("NAME"), "id": values.get("ID"),
            "version_id": values.get("VERSION_ID")}


def parse_gpu_query(text: str) -> list:
    """Rows of `nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.strip().splitlines():
        index, name, memory, driver, bus = [c.strip() for c in line.split(",")][:5]
        gpus.append({"index": int(index), "name": name,
                     "memory_mib": int(float(memory)) if memory.replace(".", "").isdigit() else None,
                     "driver": driver, "pci_bus_id": bus})
    return gpus


def parse_ib_rate(rate: str | None) -> float | None:
    """'100 Gb/sec (4X EDR)' -> 100.0 (Gbit/s)."""
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(m.group(1)) if m else None


def _state(text: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE'."""
    return text.split(":", 1)[-1].strip() if text else None


# ---------------------------------------------------------------- readers (each returns value, reason)

def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _read_or_none(path: str) -> str | None:
    try:
        return _read(path).strip()
    except OSError:
        return None


def boot_id() -> str:
    """This kernel's boot id: a pid means something on its boot only; ranks that share it share the cores."""
    return _read_or_none("/proc/sys/kernel/random/boot_id") or "unknown"


def read_paddle() -> tuple[dict | None, dict]:
    """Versions from paddle.version. When paddle is not imported yet we load only its small
    generated version module: importing paddle itself takes ~1.5 s, the whole budget."""
    module = sys.modules.get("paddle.version")
    if module is None:
        spec = importlib.util.find_spec("paddle")
        if spec is None or not spec.submodule_search_locations:
            return None, {"paddle": "paddle is not installed in this Python"}
        path = os.path.join(list(spec.submodule_search_locations)[0], "version", "__init__.py")
        vspec = importlib.util.spec_from_file_location("_fleetbench_paddle_version", path)
        module = importlib.util.module_from_spec(vspec)
        vspec.loader.exec_module(module)
    cuda, cudnn = module.cuda(), module.cudnn()
    info = {"version": module.full_version, "commit": module.commit,
            "compiled_with_cuda": cuda not in (False, "False", None, ""),
            "cuda": None, "cudnn": None, "nccl": None,
            "mkl": str(getattr(module, "with_mkl", "")).upper() == "ON"}
    missing = {}
    if info["compiled_with_cuda"]:
        info["cuda"], info["cudnn"] = str(cuda), str(cudnn)
        info["nccl"], reason = _nccl_version()
        if reason:
            missing["paddle.nccl"] = reason
    else:
        for key in ("cuda", "cudnn", "nccl"):
            missing[f"paddle.{key}"] = "paddle is a CPU build (compiled without CUDA)"
    return info, missing


def _nccl_version() -> tuple[str | None, str | None]:
    # paddle.version has no nccl() in 2.6; the NCCL build exposes core.nccl_version() (e.g. 21602).
    core = sys.modules.get("paddle.base.core") or sys.modules.get("paddle.fluid.core")
    if core is None:
        return None, "paddle not imported in this process (NCCL version comes from paddle's core)"
    if not hasattr(core, "nccl_version"):
        return None, "paddle compiled without NCCL"
    try:  # a CUDA build whose libnccl is missing raises here; the rest of the Paddle block stands
        v = int(core.nccl_version())
    except Exception as e:  # noqa: BLE001 - any failure means "version unknown", said in the record
        return None, f"NCCL version unavailable: {type(e).__name__}"
    major, rest = (v // 10000, v % 10000) if v >= 10000 else (v // 1000, v % 1000)
    return f"{major}.{rest // 100}.{rest % 100}", None


def read_gpus() -> tuple[list[dict] | None, str | None, str | None]:
    """(gpus, driver, reason) from nvidia-smi; reason says why both are None."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None, None, "nvidia-smi not found on PATH"
    try:
        proc = subprocess.run([exe, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, None, f"nvidia-smi timed out after {NVIDIA_SMI_TIMEOUT_S:g} s"
    except OSError as e:  # strerror only: str(e) names the tool's path (a user's directory, maybe)
        return None, None, f"nvidia-smi could not run: {e.strerror or type(e).__name__}"
    if proc.returncode != 0:
        first = next((ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()), "")
        return None, None, f"nvidia-smi failed (exit {proc.returncode}): {first}"
    try:
        gpus = parse_gpu_query(proc.stdout)
    except ValueError as e:
        return None, None, f"unexpected nvidia-smi output: {e}"
    driver = gpus[0].pop("driver") if gpus else None
    for g in gpus:
        g.pop("driver", None)
    return gpus, driver, (None if gpus else "nvidia-smi lists no GPU")


def _sysfs_cpu_topology(root: str) -> tuple[int | None, int | None]:
    """(sockets, cores) from /sys/devices/system/cpu/cpuN/topology, for CPUs whose
    /proc/cpuinfo lacks 'physical id' (e.g. ARM)."""
    packages, cores = set(), set()
    for name in os.listdir(root):
        if re.fullmatch(r"cpu\d+", name):
            topo = os.path.join(root, name, "topology")
            package = _read_or_none(os.path.join(topo, "physical_package_id"))
            core = _read_or_none(os.path.join(topo, "core_id"))
            if package is not None and core is not None:
                packages.add(package)
                cores.add((package, core))
    return len(packages) or None, len(cores) or None


def read_cpu(cpuinfo: str = "/proc/cpuinfo", nodes: str = "/sys/devices/system/node",
             cpus: str = "/sys/devices/system/cpu") -> tuple[dict, dict]:
    cpu = parse_cpuinfo(_read(cpuinfo))
    if cpu["sockets"] is None and os.path.isdir(cpus):
        cpu["sockets"], cpu["cores"] = _sysfs_cpu_topology(cpus)
    try:
        cpu["usable_threads"] = len(os.sched_getaffinity(0))
    except AttributeError:
        cpu["usable_threads"] = os.cpu_count()
    try:
        cpu["numa_nodes"] = len([n for n in os.listdir(nodes) if re.fullmatch(r"node\d+", n)]) or None
    except OSError:
        cpu["numa_nodes"] = None
    missing = {f"cpu.{k}": f"not found in {cpuinfo} or {cpus}" for k, v in cpu.items() if v is None}
    return cpu, missing


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text and text.lstrip("-").isdigit() else None


def _nic(base: str, name: str) -> dict:
    speed = _int_or_none(_read_or_none(os.path.join(base, "speed")))
    driver = os.path.join(base, "device", "driver")
    return {"name": name, "speed_mbps": speed if speed and speed > 0 else None,  # -1: driver doesn't know
            "mtu": _int_or_none(_read_or_none(os.path.join(base, "mtu"))),
            "state": _read_or_none(os.path.join(base, "operstate")),
            "driver": os.path.basename(os.path.realpath(driver)) if os.path.exists(driver) else None,
            "virtual": not os.path.exists(os.path.join(base, "device"))}


def read_nics(root: str = "/sys/class/net") -> tuple[list[dict], dict]:
    """Network interfaces except loopback: speed (Mbit/s; null when the driver reports none),
    MTU, state, driver, and whether it is virtual (no backing device)."""
    nics, missing = [], {}
    for name in sorted(os.listdir(root)):
        base = os.path.join(root, name)
        if _read_or_none(os.path.join(base, "type")) == "772":  # ARPHRD_LOOPBACK
            continue
        nics.append(_nic(base, name))
        if nics[-1]["speed_mbps"] is None:
            readable = _read_or_none(os.path.join(base, "speed")) is not None
            missing[f"nics.{name}.speed_mbps"] = ("driver reports no link speed" if readable else
                                                  "speed not readable (virtual or down interface)")
    return nics, missing


def _ib_port(path: str, port: str) -> dict:
    rate = _read_or_none(os.path.join(path, "rate"))
    return {"port": int(port) if port.isdigit() else port, "rate": rate, "rate_gbit": parse_ib_rate(rate),
            "state": _state(_read_or_none(os.path.join(path, "state"))),
            "phys_state": _state(_read_or_none(os.path.join(path, "phys_state"))),
            "link_layer": _read_or_none(os.path.join(path, "link_layer"))}


def _listdir(path: str) -> list[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def read_infiniband(root: str = "/sys/class/infiniband") -> list[dict]:
    """RDMA devices (InfiniBand, or RoCE when link_layer is Ethernet) with each port's rate and state."""
    devices = []
    for name in _listdir(root):
        base = os.path.join(root, name)
        ports = sorted(_listdir(os.path.join(base, "ports")), key=lambda p: int(p) if p.isdigit() else 0)
        devices.append({"device": name, "hca_type": _read_or_none(os.path.join(base, "hca_type")),
                        "fw_ver": _read_or_none(os.path.join(base, "fw_ver")),
                        "netdevs": _listdir(os.path.join(base, "device", "net")),
                        "ports": [_ib_port(os.path.join(base, "ports", p), p) for p in ports]})
    return devices


def _has_ipv6(value: str) -> bool:
    """True if a word of `value` is an IPv6 address (fe80::1, [fd00::1]:6170, ::1%eth0)."""
    for word in re.findall(r"[\w:.%]*:[\w:.%]*", value):
        try:
            ipaddress.IPv6Address(word)
            return True
        except ValueError:
            continue
    return False


def identifying(value: str) -> bool:
    """Whether an environment value names a machine or a person's files (see IDENTIFYING_VALUE)."""
    return bool(IDENTIFYING_VALUE.search(value)) or _has_ipv6(value)


def read_env_vars(environ: Mapping[str, str] | None = None) -> dict:
    environ = os.environ if environ is None else environ
    keep = sorted(k for k in environ if k.startswith(ENV_PREFIXES) or k in ENV_NAMES)
    return {k: ("<redacted>" if SECRET_NAME.search(k) or identifying(environ[k]) else environ[k])
            for k in keep}


def read_simulation(environ: Mapping[str, str] | None = None) -> dict | None:
    """The simulated GPU host this process runs on ({host, build, what}), or None on a real one."""
    path = (os.environ if environ is None else environ).get(SIMULATED_GPU)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            desc = json.load(f)
    except (OSError, ValueError) as e:  # still simulated: the record must say so even then
        return {"host": None, "build": None, "what": f"{SIMULATED_WHAT} (description unreadable: {type(e).__name__})"}
    return {"host": desc.get("host"), "build": (desc.get("build") or {}).get("name"), "what": SIMULATED_WHAT}


# ---------------------------------------------------------------- collect

def _guard(result: dict, missing: dict, key: str, reader: Callable, *args: object) -> None:
    """Run one reader; a failure becomes null + reason instead of an exception."""
    try:
        value = reader(*args)
    except Exception as e:  # the report must never take a benchmark run down
        result[key] = None
        missing[key] = f"{type(e).__name__}: {e}"
        return
    if isinstance(value, tuple):  # (value, {path: reason})
        value, more = value
        missing.update(more or {})
    result[key] = value


def _read_os() -> dict:
    info = parse_os_release(_read("/etc/os-release")) if os.path.exists("/etc/os-release") else \
        {"name": platform.system(), "id": None, "version_id": None}
    return {**info, "kernel": platform.release(), "machine": platform.machine()}


def _read_memory() -> dict:
    return parse_meminfo(_read("/proc/meminfo"))


def collect(threads: dict | None = None) -> dict:
    """The environment block stored in every result record (see module docstring). `threads`: the
    process's thread record (`fleetbench.threads_info()`), passed in by the caller: machine/ does
    not import the package root."""
    result, missing = {}, {}
    result["python"] = {"version": platform.python_version(), "implementation": platform.python_implementation()}
    _guard(result, missing, "paddle", read_paddle)
    try:
        gpus, driver, reason = read_gpus()
    except Exception as e:
        gpus, driver, reason = None, None, f"{type(e).__name__}: {e}"
    result["nvidia_driver"], result["gpus"] = driver, gpus
    result["gpu_count"] = len(gpus) if gpus is not None else None
    if reason:
        missing.update({"nvidia_driver": reason, "gpus": reason, "gpu_count": reason})
    _guard(result, missing, "cpu", read_cpu)
    _guard(result, missing, "memory", _read_memory)
    _guard(result, missing, "os", _read_os)
    _guard(result, missing, "nics", read_nics)
    _guard(result, missing, "infiniband", read_infiniband)
    _guard(result, missing, "env_vars", read_env_vars)
    result["threads"] = threads
    simulated = read_simulation()
    if simulated:
        result["simulated_gpu"] = simulated
        if result.get("paddle"):
            result["paddle"]["simulated"] = True
    result["unavailable"] = missing
    return result


# ---------------------------------------------------------------- rendering + CLI

def _na(value: object, unit: str = "") -> str:
    return "n/a" if value is None else f"{value}{unit}"


def render_markdown(env: dict) -> str:
    """A section shaped like FleetX's hand-written 'GPU Environment' / 'CPU Environment'."""
    miss, cpu, mem, osr, pd = env["unavailable"], env.get("cpu") or {}, env.get("memory") or {}, \
        env.get("os") or {}, env.get("paddle") or {}
    out = ["## GPU Environment", ""]
    if env.get("simulated_gpu"):
        out += [f"- SIMULATED ({env['simulated_gpu']['what']})"]
    if env.get("gpus"):
        names = {}
        for g in env["gpus"]:
            names.setdefault((g["name"], g["memory_mib"]), 0)
            names[(g["name"], g["memory_mib"])] += 1
        out += [f"- {name} ({_na(memory, ' MiB')}) x {n}" for (name, memory), n in names.items()]
        out.append(f"- CUDA Version (Paddle build): {_na(pd.get('cuda'))}, cuDNN {_na(pd.get('cudnn'))}, "
                   f"NCCL {_na(pd.get('nccl'))}, Driver Version: {_na(env.get('nvidia_driver'))}")
    else:
        out.append(f"- no NVIDIA GPU: {miss.get('gpus', 'none listed')}")
    for dev in env.get("infiniband") or []:
        for p in dev["ports"]:
            out.append(f"- {p['link_layer'] or 'RDMA'} {_na(p['rate'])} {p['state'] or ''}, "
                       f"{dev['device']} ({dev['hca_type'] or 'unknown HCA'})")
    out += ["", "## CPU Environment", ""]
    out.append(f"- {_na(cpu.get('model'))}: {_na(cpu.get('sockets'))} socket(s), {_na(cpu.get('cores'))} cores, "
               f"{_na(cpu.get('threads'))} threads ({_na(cpu.get('usable_threads'))} usable)")
    out.append(f"- Memory {_na(mem.get('total_mib') and round(mem['total_mib'] / 1024, 1), ' GiB')}")
    out.append(f"- {_na(osr.get('name'))} (Linux {_na(osr.get('kernel'))} {_na(osr.get('machine'))})")
    nics = env.get("nics") or []
    for nic in [n for n in nics if n["state"] in ("up", "unknown")] or nics:  # skip unused tc/ifb devices
        speed = f"{nic['speed_mbps'] / 1000:g} Gbit/s" if nic["speed_mbps"] else "speed unknown"
        out.append(f"- Network {nic['name']}: {speed}, MTU {_na(nic['mtu'])}"
                   f"{' (virtual)' if nic['virtual'] else ''}")
    out.append(f"- Paddle {_na(pd.get('version'))} (commit {_na(pd.get('commit'))[:8]}), "
               f"Python {env['python']['version']}")
    threads = env.get("threads")
    if threads:
        out.append(f"- OMP_NUM_THREADS={threads['omp_num_threads']} (set by {threads['source']})")
    return "\n".join(out)


def render_text(env: dict, indent: str = "") -> str:
    lines = []
    for key, value in env.items():
        if isinstance(value, dict) and value and key != "env_vars":
            lines.append(f"{indent}{key}:")
            lines.append(render_text(value, indent + "  "))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"{indent}{key}:")
            lines += [f"{indent}  - " + ", ".join(f"{k}={v}" for k, v in item.items()) for item in value]
        else:
            shown = json.dumps(value) if isinstance(value, (dict, list)) else _na(value)
            lines.append(f"{indent}{key}: {shown}")
    return "\n".join(lines)


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench env", description="Report the software and hardware environment.")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the JSON block stored in every result record")
    form.add_argument("--markdown", action="store_true", help="a README section like FleetX's environment lists")
    form.add_argument("--check", action="store_true",
                      help="GPU readiness: can this Paddle load CUDA, cuDNN and NCCL and see GPUs (exit 2 if not)")
    return p


def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.check:
        from fleetbench.machine import gpu_ready

        _gpus, driver, _why = read_gpus()
        status, line = gpu_ready.verdict(gpu_ready.probe(), driver)
        print(f"fleetbench env --check: {line}", file=sys.stderr if status else sys.stdout)
        return status
    import fleetbench  # this command's own process: its thread count, as a rank's record shows it

    env = collect(threads=fleetbench.threads_info())
    if args.json:
        print(json.dumps(env, indent=2))
    elif args.markdown:
        print(render_markdown(env))
    else:
        print(render_text(env))
    return 0
