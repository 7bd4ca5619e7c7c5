"""GPU/NIC topology from `nvidia-smi topo -m`: a pure parser, an analysis, and a thin runner.

`parse(text)` and `analyse(topo, gpus)` never run anything, so every output variant can be
tested from fixture files; only `detect()` runs nvidia-smi.

Exit codes of `fleetbench topo`: 0 ok, 2 bad input (unreadable/malformed file, bad --gpus),
3 no NVIDIA topology on this machine (nvidia-smi missing, failing or listing no GPU).
"""
import json
import re
import shutil
import subprocess
import sys

from fleetbench import cmdline

EXIT_BAD_INPUT = 2
EXIT_NO_TOPOLOGY = 3
DETECT_TIMEOUT_S = 10.0

# Best first. NV# is ranked above all of these by its link count (see link_score).
PCIE_CLASSES = ["PIX", "PXB", "PHB", "NODE", "SYS"]
MEANING = {
    "NV": "NVLink: a bonded set of {n} NVLink(s), no PCIe involved",
    "PIX": "PCIe through a single PCIe switch",
    "PXB": "PCIe through several PCIe switches, not through the CPU's host bridge",
    "PHB": "PCIe through a PCIe host bridge (the CPU)",
    "NODE": "PCIe plus the link between PCIe host bridges inside one NUMA node",
    "SYS": "PCIe plus the CPU-to-CPU link between NUMA nodes/sockets (e.g. QPI/UPI)",
}
SLOW_CLASSES = ("NODE", "SYS")
# Column phrases nvidia-smi prints after the device columns (one or more words each).
EXTRA_COLUMNS = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GPU = re.compile(r"^GPU\d+$")
_NV = re.compile(r"^NV(\d+)$")
_CELL = re.compile(r"^(X|NV\d+|[A-Z][A-Z0-9]{1,5}|N/A)$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
EXPECTED = ("expected `nvidia-smi topo -m` output: a header row naming the devices (GPU0 ...), "
            "then one row per device with a link code (X, NV#, PIX, PXB, PHB, NODE, SYS) per column")


class TopologyError(cmdline.UserError):
    """Text that is not a topology matrix; the message is one line."""


# ---------------------------------------------------------------- parsing (pure)

def _lines(text: str) -> list[str]:
    return _ANSI.sub("", text).replace("\r", "").split("\n")


def _find_header(lines: list[str]) -> tuple[int, list[str]]:
    for i, line in enumerate(lines):
        tokens = line.split()
        if any(_GPU.match(t) for t in tokens) and "X" not in tokens:
            return i, tokens
    raise TopologyError(f"no header row naming GPU0...; {EXPECTED}")


def _starts_extra(tokens: list[str], n: int) -> bool:
    return any(tokens[n:n + len(c.split())] == c.split() for c in EXTRA_COLUMNS)


def _split_header(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Device columns (GPU0, NIC0, mlx5_0: names always carry a digit) come first; the words
    after them form extra columns such as 'CPU Affinity'."""
    n = 0
    while n < len(tokens) and re.search(r"\d", tokens[n]) and not _starts_extra(tokens, n):
        n += 1
    devices, rest, extras = tokens[:n], " ".join(tokens[n:]), []
    while rest:
        known = next((c for c in EXTRA_COLUMNS if rest.startswith(c)), None)
        name = known or rest.split()[0]
        extras.append(name)
        rest = rest[len(name):].strip()
    return devices, extras


def _matrix_rows(lines: list[str], start: int) -> list[tuple[int, list[str]]]:
    rows = []
    for number, line in enumerate(lines[start:], start + 1):
        tokens = line.split()
        if not tokens or tokens[0].rstrip(":") == "Legend":
            break
        rows.append((number, tokens))
    return rows


def _nic_legend(lines: list[str]) -> dict[str, str]:
    legend, inside = {}, False
    for line in lines:
        if line.strip().startswith("NIC Legend"):
            inside = True
        elif inside and _NIC_LEGEND.match(line):
            nic, name = _NIC_LEGEND.match(line).groups()
            legend[nic] = name
    return legend


def parse(text: str) -> dict:
    """Parse `nvidia-smi topo -m` output (any known variant) into devices, links and affinities.
    Raises TopologyError (one line) when the text is not such a matrix."""
    lines = _lines(text)
    head, header = _find_header(lines)
    devices, extras = _split_header(header)
    rows = _matrix_rows(lines, head + 1)
    by_name = {}
    for number, tokens in rows:
        name = tokens[0]
        if name not in devices or name in by_name:
            problem = "appears twice" if name in by_name else "is not a column of the header"
            raise TopologyError(f"line {number}: row {name!r} {problem}; {EXPECTED}")
        cells, values = tokens[1:1 + len(devices)], tokens[1 + len(devices):]
        if len(cells) < len(devices):
            raise TopologyError(f"line {number}: row {name} has {len(cells)} link cells for "
                                f"{len(devices)} devices; {EXPECTED}")
        bad = next((c for c in cells if not _CELL.match(c)), None)
        if bad:
            raise TopologyError(f"line {number}: row {name} has {bad!r} where a link code belongs; {EXPECTED}")
        if cells[devices.index(name)] != "X":
            raise TopologyError(f"line {number}: row {name} lacks X on the diagonal; {EXPECTED}")
        if len(values) > len(extras):
            raise TopologyError(f"line {number}: row {name} has {len(values)} values after the links "
                                f"but the header has {len(extras)} extra columns; {EXPECTED}")
        by_name[name] = (cells, values)
    missing = [d for d in devices if d not in by_name]
    if missing:
        raise TopologyError(f"no row for {', '.join(missing)}; {EXPECTED}")
    return _build(devices, extras, by_name, _nic_legend(lines))


def _build(devices: list[str], extras: list[str], by_name: dict, legend: dict[str, str]) -> dict:
    rename = {d: legend.get(d, d) for d in devices}
    topo = {
        "gpus": [d for d in devices if _GPU.match(d)],
        "nics": [rename[d] for d in devices if not _GPU.match(d)],
        "links": {},
    }
    for d in devices:
        cells = by_name[d][0]
        topo["links"][rename[d]] = {rename[o]: cells[j] for j, o in enumerate(devices) if o != d}
    for k, column in enumerate(extras):
        values = {rename[d]: by_name[d][1][k] for d in devices if len(by_name[d][1]) > k}
        topo[column.lower().replace(" ", "_")] = values
    if legend:
        topo["nic_legend"] = legend
    return topo


# ---------------------------------------------------------------- analysis (pure)

def link_score(code: str) -> int:
    """Higher is better: NV# by link count above every PCIe class; unknown codes lowest."""
    nv = _NV.match(code)
    if nv:
        return 100 + int(nv.group(1))
    code = "SYS" if code == "SOC" else code  # SOC: pre-2017 drivers' name for SYS
    return len(PCIE_CLASSES) - PCIE_CLASSES.index(code) if code in PCIE_CLASSES else 0


def meaning(code: str) -> str:
    nv = _NV.match(code)
    if nv:
        return MEANING["NV"].format(n=nv.group(1))
    return MEANING.get("SYS" if code == "SOC" else code, "unknown link class")


def _gpu_pairs(topo: dict, gpus: list[str] | None = None) -> list[tuple[str, str]]:
    gpus = topo["gpus"] if gpus is None else gpus
    return [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]


def link_classes(topo: dict) -> list:
    """Classes present in the matrix, best first, with how many GPU-GPU and GPU-NIC pairs use each."""
    counts = {}
    for a, b in _gpu_pairs(topo):
        counts.setdefault(topo["links"][a][b], [0, 0])[0] += 1
    for g in topo["gpus"]:
        for n in topo["nics"]:
            counts.setdefault(topo["links"][g][n], [0, 0])[1] += 1
    ordered = sorted(counts, key=link_score, reverse=True)
    return [{"class": c, "gpu_pairs": counts[c][0], "gpu_nic_pairs": counts[c][1], "meaning": meaning(c)}
            for c in ordered]


def nearest_nics(topo: dict) -> dict:
    """For each GPU, the NIC(s) reached over its best link class (ties kept)."""
    result = {}
    for g in topo["gpus"]:
        if not topo["nics"]:
            break
        best = max(link_score(topo["links"][g][n]) for n in topo["nics"])
        nics = [n for n in topo["nics"] if link_score(topo["links"][g][n]) == best]
        result[g] = {"nics": nics, "link": topo["links"][g][nics[0]]}
    return result


def nvlink_groups(topo: dict) -> list:
    """Maximal sets of >= 2 GPUs in which every pair is joined by NVLink (Bron-Kerbosch; n is small)."""
    nv = {g: {o for o in topo["gpus"] if o != g and _NV.match(topo["links"][g][o])} for g in topo["gpus"]}
    cliques = []

    def grow(r: set, p: set, x: set) -> None:
        if not p and not x:
            if len(r) >= 2:
                cliques.append(r)
            return
        for v in list(p):
            grow(r | {v}, p & nv[v], x & nv[v])
            p, x = p - {v}, x | {v}

    grow(set(), set(topo["gpus"]), set())
    order = {g: i for i, g in enumerate(topo["gpus"])}
    groups = [sorted(c, key=order.get) for c in cliques]
    groups.sort(key=lambda c: (-len(c), [order[g] for g in c]))
    return [{"gpus": c, "min_nvlinks": min(int(_NV.match(topo["links"][a][b]).group(1))
                                           for a, b in _gpu_pairs(topo, c))} for c in groups]


def parse_gpu_list(text: str) -> list:
    """'0-3,6' -> [0, 1, 2, 3, 6]; raises ValueError with a one-line reason."""
    ids = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"expected GPU indices like 0-3,6, got {text!r}")
        low = int(m.group(1))
        ids += range(low, int(m.group(2) or low) + 1)
    return sorted(set(ids))


def selection(topo: dict, ids: list[int]) -> dict:
    """Worst link inside a chosen GPU set, with a warning when it leaves the PCIe host bridge."""
    names = [f"GPU{i}" for i in ids]
    unknown = [n for n in names if n not in topo["gpus"]]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} not in the topology (it has {', '.join(topo['gpus'])})")
    pairs = _gpu_pairs(topo, names)
    if not pairs:
        return {"gpus": names, "worst_link": None, "worst_pair": None, "warning": None}
    a, b = min(pairs, key=lambda p: link_score(topo["links"][p[0]][p[1]]))
    worst = topo["links"][a][b]
    warning = None
    if worst in SLOW_CLASSES or worst == "SOC":
        warning = (f"{a} and {b} talk over {worst} ({meaning(worst)}); collective bandwidth inside this "
                   f"set is limited by that path, much slower than NVLink or a shared PCIe switch.")
        groups = nvlink_groups(topo)
        largest = [g["gpus"] for g in groups if len(g["gpus"]) == len(groups[0]["gpus"])] if groups else []
        if largest:
            warning += " Fully NVLink-connected sets here: --gpus " + " or ".join(
                ",".join(name[3:] for name in g) for g in largest) + "."
    return {"gpus": names, "worst_link": worst, "worst_pair": [a, b], "warning": warning}


def analyse(topo: dict, gpus: list[int] | None = None) -> dict:
    """Ranking, nearest NICs, NVLink groups and (for a GPU index list) the worst link inside it."""
    result = {
        "ranking": "NV# (more links better) > PIX > PXB > PHB > NODE > SYS",
        "link_classes": link_classes(topo),
        "nearest_nics": nearest_nics(topo),
        "nvlink_groups": nvlink_groups(topo),
    }
    if gpus is not None:
        result["selection"] = selection(topo, gpus)
    return result


# ---------------------------------------------------------------- running nvidia-smi

def _run_topo() -> tuple[str | None, str | None]:
    """(text, None) or (None, reason)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None, "nvidia-smi not found on PATH"
    try:
        proc = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True,
                              timeout=DETECT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"nvidia-smi topo -m timed out after {DETECT_TIMEOUT_S:g} s"
    except OSError as e:
        return None, f"nvidia-smi could not run: {e}"
    output = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0 or not re.search(r"\bGPU0\b", proc.stdout or ""):
        first = next((ln.strip() for ln in output.splitlines() if ln.strip()), "no output")
        return None, f"nvidia-smi topo -m lists no GPU (exit {proc.returncode}: {first})"
    return proc.stdout, None


def detect() -> str | None:
    """Raw `nvidia-smi topo -m` text, or None when there is no NVIDIA GPU/tool."""
    return _run_topo()[0]


def detect_for_record() -> dict | None:
    """Topology for a result record: parsed matrix + analysis + raw text; None without a GPU.
    Never raises: unparsable output is stored as {"error", "raw"} so the record keeps it."""
    try:
        text = detect()
        if text is None:
            return None
        try:
            topo = parse(text)
        except TopologyError as e:
            return {"error": str(e), "raw": text}
        return {**topo, "analysis": analyse(topo), "raw": text}
    except Exception as e:  # a record must still be written; say what went wrong
        return {"error": f"topology detection failed: {type(e).__name__}: {e}", "raw": None}


# ---------------------------------------------------------------- CLI

def render_text(topo: dict, analysis: dict) -> str:
    out = [f"GPUs: {len(topo['gpus'])} ({' '.join(topo['gpus'])})",
           f"NICs: {len(topo['nics'])}" + (f" ({' '.join(topo['nics'])})" if topo["nics"] else "")]
    out.append("Link classes (best first; GPU-GPU pairs / GPU-NIC pairs):")
    out += [f"  {c['class']:<5} {c['gpu_pairs']:>3} / {c['gpu_nic_pairs']:<3} {c['meaning']}"
            for c in analysis["link_classes"]]
    groups = analysis["nvlink_groups"]
    out.append("NVLink-connected GPU sets: " + ("; ".join(
        f"{' '.join(g['gpus'])} (>= NV{g['min_nvlinks']})" for g in groups) if groups else "none"))
    for gpu, near in analysis["nearest_nics"].items():
        out.append(f"Nearest NIC for {gpu}: {', '.join(near['nics'])} over {near['link']}")
    sel = analysis.get("selection")
    if sel:
        worst = f"{sel['worst_link']} ({' - '.join(sel['worst_pair'])})" if sel["worst_link"] else "none (one GPU)"
        out.append(f"Selected {' '.join(sel['gpus'])}: worst link {worst}")
        if sel["warning"]:
            out.append("WARNING: " + sel["warning"])
    return "\n".join(out)


def _input(text: str) -> str:
    return text if text == "-" else cmdline.INPUT_FILE(text)


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench topo", description="Parse and analyse `nvidia-smi topo -m` output.",
                       epilog="exit codes: 0 ok, 2 bad input, 3 no NVIDIA topology here")
    p.add_argument("--input", metavar="FILE", type=cmdline.Kind("a file it can read, or -", _input,
                                                                  ("", cmdline.MISSING, cmdline.DIRECTORY)),
                   help="read saved `nvidia-smi topo -m` text ('-' = stdin) instead of running nvidia-smi")
    p.add_argument("--json", action="store_true", help="print the parsed matrix and analysis as JSON")
    p.add_argument("--gpus", metavar="LIST", type=cmdline.Kind("GPU indices like 0-3,6", parse_gpu_list,
                                                                ("", "3-1", "a", "-1")),
                   help="GPU indices to check, e.g. 0-3,6: reports the worst link inside the set")
    return p


def cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    ids = args.gpus
    if args.input:
        source = "<stdin>" if args.input == "-" else args.input
        try:
            text = sys.stdin.read() if args.input == "-" else open(args.input, encoding="utf-8",
                                                                    errors="replace").read()
        except OSError as e:
            print(f"fleetbench topo: {source}: cannot read: {e.strerror or e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    else:
        source = "nvidia-smi topo -m"
        text, reason = _run_topo()
        if text is None:
            print(f"fleetbench topo: no NVIDIA GPU topology available on this machine ({reason}); "
                  f"use --input FILE to analyse saved `nvidia-smi topo -m` output", file=sys.stderr)
            return EXIT_NO_TOPOLOGY
    try:
        topo = parse(text)
        analysis = analyse(topo, ids)
    except (TopologyError, ValueError) as e:
        flag = "" if isinstance(e, TopologyError) else "--gpus: "
        print(f"fleetbench topo: {flag or source + ': '}{e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps({**topo, "analysis": analysis}, indent=2))
    else:
        print(render_text(topo, analysis))
    return 0
