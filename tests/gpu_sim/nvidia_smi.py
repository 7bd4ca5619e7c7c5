"""`nvidia-smi` of the simulated GPU host (simhost.py): the subset fleetbench and a first-node
checklist use, answered from the host description SIMULATED_GPU_HOST names.

    nvidia-smi -L
    nvidia-smi topo -m
    nvidia-smi --query-gpu=F1,F2,... --format=csv[,noheader][,nounits] [-i ID[,ID]]
    nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader

The output follows nvidia-smi(1) (driver 535): `-L` one `GPU i: NAME (UUID: ...)` line per GPU;
`topo -m` the matrix with its legend and NIC legend; a query one CSV line per GPU with ", "
between fields, units unless `nounits`, `[N/A]` for what the GPU does not have, and `Field "x"
is not a valid field to query.` (exit 2) for a name it does not know. nvidia-smi ignores
CUDA_VISIBLE_DEVICES, and so does this.

A device is under load while a live process has selected it (facade.py writes busy-<pid> in the
host's state directory, naming the physical index): its clocks and temperature are then the
description's load_* figures, else the idle ones, and the process is listed among its compute apps.
Stdlib only: it runs with `python -I`.
"""
import json
import os
import sys

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
             "the latest NVIDIA driver is installed and running.")
LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def holders(desc):
    """{pid: physical index} of the live processes that have selected a device (facade.py's
    busy-<pid> files): their contexts, as --query-compute-apps lists them."""
    out = {}
    state = desc.get("state_dir") or ""
    for name in (os.listdir(state) if os.path.isdir(state) else []):
        if not name.startswith("busy-"):
            continue
        try:
            os.kill(int(name[5:]), 0)
            with open(os.path.join(state, name)) as f:
                out[int(name[5:])] = int(json.load(f)["device"])
        except (OSError, ValueError, KeyError):
            continue  # a process that is gone, or a file being rewritten
    return out


def busy_devices(desc):
    """Physical indices some live process has selected."""
    return set(holders(desc).values())


def compute_apps(desc, argv):
    """--query-compute-apps=pid,gpu_uuid,...: one line per process holding a device."""
    fields = next(a for a in argv if a.startswith("--query-compute-apps=")).split("=", 1)[1].split(",")
    rows = []
    for pid, index in sorted(holders(desc).items()):
        gpu = desc["gpus"][index]
        values = {"pid": pid, "gpu_uuid": gpu["uuid"], "gpu_bus_id": gpu["pci_bus_id"], "process_name": "python",
                  "used_gpu_memory": 1024, "used_memory": 1024}
        unknown = [f for f in fields if f.strip() not in values]
        if unknown:
            print(f'Field "{unknown[0].strip()}" is not a valid field to query.', file=sys.stderr)
            return 2
        rows.append(", ".join(str(values[f.strip()]) for f in fields))
    print("\n".join(rows))
    return 0


def field_value(gpu, field, desc, busy):
    """(value, unit) of one --query-gpu field for one GPU, or None for an unknown field."""
    load = gpu["index"] in busy
    values = {
        "index": (gpu["index"], ""), "name": (gpu["name"], ""), "uuid": (gpu["uuid"], ""),
        "pci.bus_id": (gpu["pci_bus_id"], ""), "driver_version": (desc["driver"], ""),
        "memory.total": (gpu["memory_mib"], " MiB"),
        "memory.used": (1024 if load else 0, " MiB"), "memory.free": (gpu["memory_mib"] - (1024 if load else 0), " MiB"),
        "clocks.sm": (gpu["load_sm"] if load else gpu["idle_sm"], " MHz"),
        "clocks.max.sm": (gpu["max_sm"], " MHz"),
        "clocks.mem": (gpu["max_mem"] if load else 405, " MHz"), "clocks.max.mem": (gpu["max_mem"], " MHz"),
        "temperature.gpu": (gpu["load_temp"] if load else gpu["idle_temp"], ""),
        "utilization.gpu": (100 if load else 0, " %"),
        "ecc.errors.corrected.volatile.total": (gpu["ecc_corrected"], ""),
        "ecc.errors.uncorrected.volatile.total": (gpu["ecc_uncorrected"], ""),
        "compute_cap": (".".join(map(str, gpu["capability"])), ""),
    }
    aliases = {"clocks.current.sm": "clocks.sm", "clocks.current.memory": "clocks.mem", "clocks.max.memory": "clocks.max.mem",
               "clocks.max.sm": "clocks.max.sm", "gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id"}
    return values.get(aliases.get(field, field))


def query(desc, argv):
    fields = next(a for a in argv if a.startswith("--query-gpu=")).split("=", 1)[1].split(",")
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "")
    if "csv" not in fmt.split(","):
        print('"--format=" must be specified with "csv".' if not fmt else f'Invalid format "{fmt}".', file=sys.stderr)
        return 2
    ids = None
    if "-i" in argv:
        ids = {int(x) for x in argv[argv.index("-i") + 1].split(",")}
    busy = busy_devices(desc)
    rows = []
    for gpu in desc["gpus"]:
        if ids is not None and gpu["index"] not in ids:
            continue
        cells = []
        for field in fields:
            value = field_value(gpu, field.strip(), desc, busy)
            if value is None:
                print(f'Field "{field.strip()}" is not a valid field to query.', file=sys.stderr)
                return 2
            cells.append(f"{value[0]}{'' if 'nounits' in fmt else value[1]}")
        rows.append(", ".join(cells))
    if "noheader" not in fmt:
        print(", ".join(fields))
    print("\n".join(rows))
    return 0


def link(desc, a, b):
    """The topo -m code between GPU a and GPU b."""
    if desc["topology"] == "nvswitch":
        return "NV12"
    ga, gb = desc["gpus"][a], desc["gpus"][b]
    if ga["socket"] != gb["socket"]:
        return "SYS"
    return "PIX" if a // 2 == b // 2 else "NODE"


def nic_link(desc, gpu, nic):
    """GPUs 2k, 2k+1 (8 GPUs over 4 NICs: each NIC with a pair; fewer NICs: a socket each) share
    a PCIe switch with their NIC."""
    n_gpus, n_nics = len(desc["gpus"]), len(desc["nics"])
    per_nic = max(1, n_gpus // max(1, n_nics))
    nic_socket = 0 if nic < max(1, n_nics // 2) else 1
    if gpu // per_nic == nic:
        return "PXB"
    return "NODE" if desc["gpus"][gpu]["socket"] == nic_socket else "SYS"


def topo(desc):
    gpus, nics = desc["gpus"], desc["nics"]
    names = [f"GPU{g['index']}" for g in gpus] + [f"NIC{k}" for k in range(len(nics))]
    half = max(1, len(gpus) // 2)
    lines = ["\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity"])]
    for g in gpus:
        i = g["index"]
        cells = [" X " if j == i else link(desc, i, j) for j in range(len(gpus))]
        cells += [nic_link(desc, i, k) for k in range(len(nics))]
        cpus = "0-31,64-95" if i < half else "32-63,96-127"
        lines.append("\t".join([f"GPU{i}", *cells, cpus, str(g["socket"])]))
    for k in range(len(nics)):
        cells = [nic_link(desc, g["index"], k) for g in gpus]
        cells += [" X " if m == k else ("NODE" if (m < len(nics) // 2) == (k < len(nics) // 2) else "SYS")
                  for m in range(len(nics))]
        lines.append("\t".join([f"NIC{k}", *cells, "", ""]))
    out = "\n".join(lines) + "\n" + LEGEND
    if nics:
        out += "\nNIC Legend:\n\n" + "\n".join(f"  NIC{k}: {name}" for k, name in enumerate(nics)) + "\n"
    return out


def main(argv):
    path = os.environ.get("SIMULATED_GPU_HOST")
    if not path or not os.path.exists(path):
        print(NO_DRIVER)
        return 9
    with open(path) as f:
        desc = json.load(f)
    if not desc.get("driver"):
        print(NO_DRIVER)
        return 9
    if argv == ["-L"]:
        print("\n".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})" for g in desc["gpus"]))
        return 0
    if argv[:2] == ["topo", "-m"]:
        print(topo(desc), end="")
        return 0
    if any(a.startswith("--query-gpu=") for a in argv):
        return query(desc, argv)
    if any(a.startswith("--query-compute-apps=") for a in argv):
        return compute_apps(desc, argv)
    print(f"nvidia-smi (simulated): {' '.join(argv) or '(no arguments)'} is not simulated; -L, topo -m and "
          f"--query-gpu are", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
