"""What the parameter-server workers say to each other (gloo, through fleet.util), and waiting
for the servers' ports."""
from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:  # numpy too would read OMP_NUM_THREADS at import: imported inside functions
    import numpy as np


class Gloo:
    """The workers' collectives; a metrics.Communicator. Every worker calls each method together."""

    def __init__(self, worker: int, workers: int) -> None:
        from paddle.distributed import fleet
        self.util, self.worker, self.workers = fleet.util, worker, workers

    def barrier(self) -> None:
        if self.workers > 1:
            self.util.barrier("worker")

    def _reduced(self, values: list | np.ndarray, op: str) -> np.ndarray:
        import numpy as np
        values = np.asarray(values, dtype="float64")
        return values if self.workers == 1 else np.asarray(self.util.all_reduce(values, op, "worker"))

    def sum(self, values: list | np.ndarray) -> list:
        return self._reduced(values, "sum").tolist()

    def max(self, values: list | np.ndarray) -> list:
        return self._reduced(values, "max").tolist()

    def gather(self, values: list) -> List[list]:
        """Every worker's values, by worker (gloo reduces only: each worker fills its own row)."""
        import numpy as np
        rows = np.zeros((self.workers, len(values)))
        rows[self.worker] = values
        return self._reduced(rows, "sum").reshape(self.workers, len(values)).tolist()

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
