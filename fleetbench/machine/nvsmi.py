"""`nvidia-smi --query-gpu=... --format=csv,noheader,nounits` as numbers (pure: text in, values out).

The command (nvidia-smi(1), "Query Options"; the field names are listed by `nvidia-smi
--help-query-gpu`): one line per GPU, the fields in the order queried, separated by ", ".
Unsupported or unavailable fields read `[N/A]` or `[Not Supported]` (ECC counters on GPUs without
ECC, for instance); those are None here. `nounits` drops the units; should a unit be left
(`1410 MHz`, as `--format=csv` alone prints), it is dropped here too.

Used by `fleetbench diagnose` on GPU nodes (fleetbench/diagnose/gpu.py): untested on a GPU here.
"""
from __future__ import annotations

# What diagnose asks for, in this order (the parser maps columns by it).
FIELDS = ("index", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "temperature.gpu",
          "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total")
UNAVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "")


def command(fields: tuple[str, ...] = FIELDS) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def _number(text: str) -> float | None:
    text = text.strip()
    if text in UNAVAILABLE:
        return None
    head = text.split()[0]  # "1410 MHz" -> "1410"
    try:
        return float(head)
    except ValueError:
        return None


def parse(text: str, fields: tuple[str, ...] = FIELDS) -> list[dict]:
    """One dict per GPU line: field -> float or None. A line with another number of columns than
    `fields` raises ValueError naming it (the query and the output do not match)."""
    rows = []
    for line in (raw for raw in text.splitlines() if raw.strip()):
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError(f"nvidia-smi line {line!r}: {len(cells)} columns, "
                             f"expected {len(fields)} ({','.join(fields)})")
        rows.append({f: _number(c) for f, c in zip(fields, cells)})
    return rows


def figures(row: dict) -> dict:
    """A GPU's diagnosis figures from its parsed row, named as fleetbench.diagnose.judging.metrics names
    them: clocks (MHz) and their share of the maximum, temperature (°C), ECC error counts since
    the driver loaded (volatile)."""
    sm, sm_max = row.get("clocks.sm"), row.get("clocks.max.sm")
    return {"gpu_sm_clock_mhz": sm, "gpu_sm_clock_max_mhz": sm_max,
            "gpu_sm_clock_ratio": sm / sm_max if sm is not None and sm_max else None,
            "gpu_mem_clock_mhz": row.get("clocks.mem"), "gpu_temperature_c": row.get("temperature.gpu"),
            "gpu_ecc_corrected_errors": row.get("ecc.errors.corrected.volatile.total"),
            "gpu_ecc_uncorrected_errors": row.get("ecc.errors.uncorrected.volatile.total")}
