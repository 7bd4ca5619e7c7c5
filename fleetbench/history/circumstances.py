"""What a run ran on, by name, and what differs: between the two sides of a comparison, and across a
change point of a history (pure: records in, values out).

A record's `env` block (machine/env.py) is a nested dict of everything the machine said; a reader
wants a dozen names: the CPU model and its thread count, the GPU model and count, the NVIDIA driver,
CUDA, cuDNN, NCCL, the Paddle version and commit, the kernel, fleetbench's commit, the network and
the thread count the ranks used. `of(record)` gives them as {name: text}; `differences` says which
take other values on the two sides; `HARDWARE` are the names whose difference makes two sides
different experiments rather than a before and an after (`compare` gives them no verdict by default).
"""
from __future__ import annotations

from fleetbench.measure.repeats import experiment
from fleetbench.store import results
from fleetbench.store.results import Environment, PaddleBuild, Record

# (name, label): the order in which differences are printed
FIELDS = (("cpu", "CPU"), ("cpu_threads", "CPU threads"), ("gpu", "GPU"), ("gpu_count", "GPUs"),
          ("driver", "driver"), ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("nccl", "NCCL"),
          ("paddle", "Paddle"), ("paddle_commit", "Paddle commit"), ("kernel", "kernel"),
          ("fleetbench", "fleetbench commit"), ("network", "network"), ("threads", "threads"))
LABELS = dict(FIELDS)
HARDWARE = ("cpu", "cpu_threads", "gpu", "gpu_count")
# What `history` names as unchanged at a change point when it did not change (the software a
# user upgrades); the rest are named only when they changed.
ALWAYS_SAID = ("paddle", "nccl", "cuda", "driver")
ACROSS_HARDWARE_FLAG = "--across-hardware"


def _text(value) -> str | None:
    return None if value is None or value == "" else str(value)


def of(record) -> dict:
    """{name: text or None} of FIELDS for one record (a Record or a schema-1 object; None: the
    record does not say)."""
    record = Record.of(record)
    env = record.env or Environment.of({})
    paddle = env.paddle or PaddleBuild.of({})
    threads = env.omp_threads if env.omp_threads is not None else record.setting("runtime.threads.omp_num_threads")
    values = {"cpu": env.cpu_model, "cpu_threads": env.cpu_threads,
              "gpu": " + ".join(sorted(set(env.gpus))) or None,
              "gpu_count": env.gpu_count if env.gpus else None, "driver": env.nvidia_driver,
              "cuda": paddle.cuda, "cudnn": paddle.cudnn, "nccl": paddle.nccl,
              "paddle": paddle.version, "paddle_commit": (paddle.commit or "")[:8] or None,
              "kernel": env.kernel, "fleetbench": results.short_commit(record.git) or None,
              "network": experiment.network_name(record.network) or "local", "threads": threads}
    return {name: _text(values[name]) for name, _ in FIELDS}


def values(items, named: bool = False) -> dict:
    """{name: sorted distinct texts} over records (or, `named`, over `of`'s dicts already made);
    '?' for one that does not say."""
    seen: dict[str, set] = {name: set() for name, _ in FIELDS}
    for item in items:
        for name, value in (item if named else of(item)).items():
            seen[name].add(value if value is not None else "?")
    return {name: sorted(v) for name, v in seen.items()}


def differences(base, new, named: bool = False) -> dict:
    """{name: {"base": [texts], "new": [texts]}} for every circumstance whose values differ between
    the two sides (records, or `of`'s dicts with `named`), in FIELDS order."""
    a, b = values(base, named), values(new, named)
    return {name: {"base": a[name], "new": b[name]} for name, _ in FIELDS if a[name] != b[name]}


def judge_cells(cells: list[dict], by_id: dict, across_hardware: bool = False) -> None:
    """Each compared cell (compare.compare_pairs) gets `differs` (differences between its two
    sides' runs, `by_id`: {run id: record}); a cell whose sides ran on other hardware gets the
    verdict compare.HARDWARE instead of its own (kept as `verdict_withheld`) and a note saying
    why and which flag compares across hardware on purpose, unless `across_hardware`."""
    from fleetbench.history import compare
    for cell in cells:
        runs = [[by_id[i] for i in cell[side]["ids"] if i in by_id] for side in ("base", "new")]
        cell["differs"] = differences(*runs)
        other = hardware(cell["differs"])
        if other and not across_hardware and cell["verdict"] != compare.INSUFFICIENT:
            said = "; ".join(change_text(n, cell["differs"][n]) for n in other)
            cell.update(verdict_withheld=cell["verdict"], verdict=compare.HARDWARE,
                        note=f"hardware differs ({said}): two experiments, not a before and after; "
                             f"no faster/slower verdict ({ACROSS_HARDWARE_FLAG} compares across hardware on purpose)")


def hardware(diff: dict) -> list[str]:
    """The hardware names among `differences`: two sides that differ in them are two experiments."""
    return [name for name in HARDWARE if name in diff]


def change_text(name: str, diff: dict) -> str:
    """`NCCL 2.18.3 → 2.19.3`."""
    return f"{LABELS[name]} {', '.join(diff['base'])} → {', '.join(diff['new'])}"


def summary(diff: dict, said=ALWAYS_SAID) -> str:
    """`NCCL 2.18.3 → 2.19.3; Paddle unchanged; driver unchanged`, or `nothing recorded changed`.
    `said`: the names to call unchanged when they did not change (those the records say)."""
    parts = [change_text(name, d) for name, d in diff.items()]
    if not parts:
        return ("nothing recorded changed (no difference in CPU, GPU, driver, CUDA, cuDNN, NCCL, Paddle, kernel, "
                "commit, network, threads)")
    return "; ".join(parts + [f"{LABELS[n]} unchanged" for n in said if n not in diff])


def explain(before: list[dict], after: list[dict]) -> dict:
    """What changed between the runs before a change point and after it (`of`'s dicts):
    {"changed": differences, "text": summary}; the software named unchanged only where the runs say
    it (a CPU run has no NCCL or driver)."""
    diff = differences(before, after, named=True)
    known = values(before + after, named=True)
    said = [n for n in ALWAYS_SAID if known[n] != ["?"]]
    return {"changed": diff, "text": summary(diff, said)}


def lines(diff: dict) -> list[str]:
    """One line per differing circumstance, for under a comparison's table."""
    return [f"{LABELS[name]}: base {', '.join(d['base'])}; new {', '.join(d['new'])}"
            + (" (hardware)" if name in HARDWARE else "") for name, d in diff.items()]
