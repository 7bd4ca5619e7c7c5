"""Data formats only: readers, validators and generators per data set. Nothing here imports the
training harness, so a pipe process or `fleetbench data` starts without Paddle's machinery."""
import json
import os


class DataError(ValueError):
    """Bad or missing data; str(err) is one line naming the file (and line) and what was expected."""


def append_counts(path: str, counts: dict) -> None:
    """A pipe's counts at the end of its input, summed by the PS driver (read_pipe_counts): one
    JSON line in one O_APPEND write, as the pipes of a worker's threads share the file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(counts) + "\n").encode())
    finally:
        os.close(fd)
