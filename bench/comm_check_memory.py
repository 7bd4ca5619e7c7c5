"""Peak host memory of the comm check for an 8-rank all_reduce of 1 GiB float32 (issue 26
finding 2), simulated in one process: each rank's expected values and #wrong, as
collectives.measure_one computes them, against one received buffer (the device->host copy every
rank makes). Prints the peak RSS above the received buffer, as a multiple of the buffer.
Run: .venv/bin/python bench/comm_check_memory.py  (target: under 2x the buffer)."""
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fleetbench.comm import opmath  # noqa: E402

RANKS, NBYTES = 8, 1 << 30


def main() -> None:
    count = NBYTES // 4
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    received = opmath.expected("all_reduce", 0, RANKS, count, "sum")  # what a correct op returns
    with_buffer = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    wrong = sum(opmath.count_wrong(received, opmath.expected_periodic("all_reduce", r, RANKS, count, "sum"),
                                   "float32") for r in range(RANKS))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"ranks {RANKS}, buffer {NBYTES / 2**30:.0f} GiB float32: #wrong {wrong}; peak RSS growth "
          f"{(peak - before) / NBYTES:.3f}x the buffer, of which the received copy "
          f"{(with_buffer - before) / NBYTES:.3f}x and the check {(peak - with_buffer) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
