"""What the parameter-server workers say to each other (gloo, through fleet.util), and waiting
for the servers' ports."""
from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, List, Optional

if TYPE_CHECKING:  # numpy too would read OMP_NUM_THREADS at import: imported inside functions
    import numpy as np


class Gloo:
    """The workers' collectives; a metrics.Communicator. Every worker calls each method together.

    Paddle's gloo reduces a list of Python floats as float32: its binding offers float before double
    (paddle/fluid/pybind/gloo_wrapper_py.cc), so pybind takes the first. Measured on 2.6.2: worker
    0's 1764421234567.891 (a wall clock in ms) came back 1764421271552.0, 8.2472011234567 as
    8.247200965881348. So every collective here is a gather of each float64's two 32-bit halves as
    integers (the integer overloads are 64-bit, and a sum of one row's integers with the other
    workers' zeros is exact), and sums and maxima are taken here, in float64, from the rows."""

    def __init__(self, worker: int, workers: int, util: Any = None) -> None:
        """`util`: fleet.util (its all_reduce and barrier), unless given."""
        if util is None:
            from paddle.distributed import fleet
            util = fleet.util
        self.util, self.worker, self.workers = util, worker, workers

    def barrier(self) -> None:
        if self.workers > 1:
            self.util.barrier("worker")

    def _rows(self, values: list | np.ndarray) -> np.ndarray:
        """Every worker's values (float64, bit for bit), one row a worker."""
        import numpy as np
        mine = np.asarray(values, dtype="float64").reshape(-1)
        if self.workers == 1:
            return mine.reshape(1, -1)
        halves = np.zeros((self.workers, mine.size * 2), dtype="uint32")
        halves[self.worker] = mine.view("uint32")
        summed = self.util.all_reduce([int(h) for h in halves.reshape(-1)], "sum", "worker")
        return np.asarray(summed, dtype="uint32").view("float64").reshape(self.workers, mine.size)

    def sum(self, values: list | np.ndarray) -> list:
        return self._rows(values).sum(axis=0).tolist()

    def max(self, values: list | np.ndarray) -> list:
        return self._rows(values).max(axis=0).tolist()

    def gather(self, values: list) -> List[list]:
        """Every worker's values, by worker."""
        return self._rows(values).tolist()

    def agree_on_errors(self, message: Optional[str]) -> List[str]:
        """Every worker learns every worker's error message, as its text's bytes in its own row."""
        width = 400
        data = list(message.encode()[:width]) if message else []
        rows = self.gather(data + [0] * (width - len(data)))
        return [f"worker {i}: " + bytes(int(c) for c in row if c).decode(errors="replace")
                for i, row in enumerate(rows) if any(row)]


def accepting(endpoint: str) -> bool:
    host, port = endpoint.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def wait_ports(endpoints: Iterable[str], up: bool, deadline_s: float) -> bool:
    """Poll until every server accepts connections (up) or none does (not up). Paddle's own wait
    for servers sleeps 3 s between tries; polling at 0.1 s first saves most of that per job."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if all(accepting(e) == up for e in endpoints):
            return True
        time.sleep(0.1)
    return False
