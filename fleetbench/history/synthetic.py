"""Constructed histories: schema-1 records whose figures and circumstances are known, from a seeded
generator (numpy's default_rng), for the tests of `history`, `regressions` and the gate, and for
bench/history_store.py's 100,000 records. Nothing here runs or measures anything: a record made
here says so (`config.synthetic`, `env.synthetic`), and no reader mistakes it for a measured run
because its id, host and commit are its own.

    series(seed, runs=40, at=20, step_pct=-12.0, changed={"nccl": ("2.18.3", "2.19.3")})
        one cell's runs in time order, its throughput `step_pct` lower from run `at` on, and the
        named circumstances changing there (any of ENV_PATHS; none: nothing changes)
"""
from __future__ import annotations

import copy
import datetime

# a circumstance's name (history/circumstances.FIELDS) -> where it lives in the record's env
ENV_PATHS = {"nccl": ("paddle", "nccl"), "cuda": ("paddle", "cuda"), "cudnn": ("paddle", "cudnn"),
             "paddle": ("paddle", "version"), "paddle_commit": ("paddle", "commit"), "driver": ("nvidia_driver",),
             "kernel": ("os", "kernel"), "cpu": ("cpu", "model"), "cpu_threads": ("cpu", "threads")}
START = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)


def base_env() -> dict:
    """A GPU host's environment, as machine/env.py records one (the fields history reads)."""
    return {"synthetic": True, "cpu": {"model": "Intel Xeon Gold 6248", "cores": 40, "threads": 80, "sockets": 2},
            "memory": {"total_mib": 385000}, "gpu_count": 8, "nvidia_driver": "535.104.05",
            "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920} for i in range(8)],
            "os": {"kernel": "5.15.0-91-generic", "name": "Ubuntu 22.04"}, "threads": {"omp_num_threads": 8},
            "paddle": {"version": "2.6.2", "commit": "8ce0de584c570589117e403322f3d1a0de6554e5",
                       "compiled_with_cuda": True, "cuda": "12.0", "cudnn": "8.9", "nccl": "2.18.3"}}


def record(throughput: float, when: datetime.datetime, ident: str, env: dict, *, benchmark: str = "resnet50",
           method: str = "mgwfbp", nodes: int = 2, git: str = "f1ee7be" * 5 + "ab") -> dict:
    """One schema-1 record of a collective run with this throughput (images/s), time and env."""
    return {"schema": 1, "id": ident, "time": when.isoformat(timespec="milliseconds"), "git": git,
            "benchmark": benchmark, "preset": "full", "mode": "collective", "method": method,
            "network": None, "nodes": nodes, "devices_per_node": 8, "world_size": nodes * 8, "error": None,
            "config": {"batch_size": 64, "seed": 1, "method": method, "synthetic": True,
                       "runtime": {"device": "gpu", "paddle": env["paddle"]["version"]}},
            "metrics": {"throughput": float(throughput), "unit": "images/s", "interference_cpu_pct": 0.5,
                        "rank_elapsed_s": [10.0] * nodes},
            "env": env, "topology": None, "launch": None}


def _set(env: dict, name: str, value) -> dict:
    env = copy.deepcopy(env)
    *parents, last = ENV_PATHS[name]
    block = env
    for key in parents:
        block = block.setdefault(key, {})
    block[last] = value
    return env


def series(seed: int, runs: int = 40, at: int | None = 20, step_pct: float = -12.0, *, changed: dict | None = None,
           cv: float = 0.02, mean: float = 1000.0, start: datetime.datetime = START, **cell) -> list[dict]:
    """One cell's `runs` records an hour apart from `start`; from run index `at` (None: never) the
    throughput is `step_pct` % off and each circumstance of `changed` ({name: (before, after)})
    takes its after value. Noise: normal, std `cv` of the mean, from default_rng(seed)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    before_env, after_env = base_env(), base_env()
    for name, (old, new) in (changed or {}).items():
        before_env, after_env = _set(before_env, name, old), _set(after_env, name, new)
    out = []
    tag = "-".join(f"{k}={v}" for k, v in sorted(cell.items()))
    for i in range(runs):
        late = at is not None and i >= at
        value = mean * (1 + step_pct / 100 if late else 1) * (1 + cv * rng.standard_normal())
        out.append(record(value, start + datetime.timedelta(hours=i), f"s{seed}-{tag}-{i}",
                          after_env if late else before_env, **cell))
    return out


def sides(seed: int, n: int = 10, change_pct: float = 0.0, cv: float = 0.03, mean: float = 1000.0) -> tuple:
    """(base, new) records of one cell, `n` runs each, new `change_pct` % off (0: an A/A pair),
    both sides on the same machine and software, interleaved in time."""
    import numpy as np
    rng = np.random.default_rng(seed)
    env = base_env()
    base, new = [], []
    for i in range(n):
        for side, factor, name in ((base, 1.0, "b"), (new, 1 + change_pct / 100, "n")):
            value = mean * factor * (1 + cv * rng.standard_normal())
            when = START + datetime.timedelta(minutes=2 * i + (name == "n"))
            side.append(record(value, when, f"g{seed}-{name}{i}", env))
    return base, new
