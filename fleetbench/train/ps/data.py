"""Data for the parameter-server driver: sharding whole files over workers, the data pipe
command, its counters, cached synthetic data sets, and loading a worker's Fleet dataset.

Paddle's dataset reads each file through a shell, `( PIPE_COMMAND ) < "FILE"` (Paddle 2.6.2,
framework/io/fs.cc), so a file name holding a character the shell expands inside double quotes
would run as a command: such names are refused (`check_names`) before anything starts.
"""
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from fleetbench.measure import registry
from fleetbench.train.ps.config import PSConfig, Workload
from fleetbench.train.ps.paddle26 import Quiet

SHELL_SPECIAL = set('"$`\\\n')  # what a shell interprets inside "...", and a line break


def shard(files: list, worker: int, workers: int) -> list:
    """Worker `worker`'s share: every `workers`-th file starting at its index (disjoint, and the
    union over workers is every file)."""
    return list(files[worker::workers])


def check_names(files: Iterable[str | Path]) -> list:
    """The files as absolute paths (the dataset reads them from a scratch directory), or
    ValueError naming the first whose name the dataset's shell would interpret."""
    for path in files:
        special = sorted(SHELL_SPECIAL & set(str(path)))
        if special:
            raise ValueError(f"data file {str(path)!r}: its name holds {' '.join(map(repr, special))}, which "
                             f"Paddle's dataset would pass to a shell inside double quotes; rename the file")
    return [Path(path).absolute() for path in files]


def pipe_command(module: str, *args: object) -> str:
    """`python -m MODULE args` with the repository importable, for Dataset.set_pipe_command."""
    path = os.pathsep.join(p for p in (str(registry.REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    words = [sys.executable, "-m", module, *map(str, args)]
    return f"PYTHONPATH={shlex.quote(path)} " + " ".join(shlex.quote(w) for w in words)


def read_pipe_counts(path: str | Path) -> dict:
    """Sum of the counts every pipe process appended (datasets.criteo.append_counts)."""
    totals = {}
    if os.path.exists(path):
        for line in Path(path).read_text().splitlines():
            for key, value in json.loads(line).items():
                totals[key] = totals.get(key, 0) + value
    return totals


def synthetic_dir(name: str, params: dict, make: Callable[[Path], None]) -> Path:
    """A cached synthetic data set: made once per machine by whichever local process gets the
    lock first (the others wait), in a temporary directory renamed into place when complete."""
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    root = Path(os.environ.get("FLEETBENCH_DATA_CACHE", Path.home() / ".cache" / "fleetbench" / "data"))
    final = root / f"{name}-{key}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.exists():
            work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
            try:
                make(work)
                (work / ".params.json").write_text(json.dumps(params, sort_keys=True))
                work.rename(final)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return final


def count_lines(files: Iterable[str | Path]) -> int:
    total = 0
    for path in files:
        with open(path, "rb") as handle:
            total += sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    return total


def make_dataset(cfg: PSConfig, work: Workload, files: list, counts_path: str | Path) -> Any:
    import paddle
    dataset = (paddle.distributed.InMemoryDataset() if cfg.dataset == "InMemoryDataset"
               else paddle.distributed.QueueDataset())
    dataset.init(batch_size=cfg.batch_size, thread_num=cfg.data.num_workers, use_var=work.inputs,
                 pipe_command=f"{work.pipe_command} --stats {shlex.quote(str(counts_path))}")
    dataset.set_filelist([str(f) for f in check_names(files)])
    return dataset


def load(cfg: PSConfig, work: Workload, mine: list, first_error: Callable,
         counts_path: str | Path) -> tuple[Any, int, float]:
    """This worker's dataset: (dataset, rows per pass, load seconds). ValueError for bad data."""
    if not mine:
        raise ValueError("no data file for this worker: each worker reads whole files, so there must "
                         "be at least as many files as workers")
    if cfg.data.strict:
        bad = first_error(mine)
        if bad:
            raise ValueError(f"invalid input line (data.strict): {bad}")
    with Quiet():
        dataset = make_dataset(cfg, work, mine, counts_path)
        if cfg.dataset == "QueueDataset":  # streams the files during each pass
            return dataset, count_lines(mine), 0.0
        tick = time.perf_counter()
        dataset.load_into_memory()
        return dataset, dataset.get_memory_data_size(), time.perf_counter() - tick
