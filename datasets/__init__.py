"""Data formats only: readers, validators and generators per data set. Nothing here imports the
training harness, so a pipe process or `fleetbench data` starts without Paddle's machinery."""
import argparse
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from fleetbench import cmdline


class DataError(cmdline.UserError):
    """Bad or missing data; str(err) is one line naming the file (and line) and what was expected."""


def append_counts(path: str, counts: dict) -> None:
    """A pipe's counts at the end of its input, summed by the PS driver (read_pipe_counts): one
    JSON line in one O_APPEND write, as the pipes of a worker's threads share the file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(counts) + "\n").encode())
    finally:
        os.close(fd)


def add_out_argument(parser: argparse.ArgumentParser, help_text: str, kind: object = None) -> None:
    """`--out PATH`, as every `fleetbench data gen` takes it; bert and wmt16 also keep their first
    form, a positional OUT, so scripts written against it still run. `kind`: the flag's type."""
    parser.add_argument("--out", help=help_text, type=kind)
    parser.add_argument("out_positional", nargs="?", metavar="OUT", type=kind, help="the same as --out (older form)")


def out_path(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The one output path given by add_out_argument's flags; a parser error (exit 2) otherwise."""
    if args.out and args.out_positional:
        parser.error(f"the output is given twice ({args.out_positional} and --out {args.out}); give --out only")
    if not (args.out or args.out_positional):
        parser.error("the following arguments are required: --out")
    return args.out or args.out_positional


class Batches:
    """Re-iterable: each pass is one epoch of this rank's slices of the shared global batches.

    `arrays` maps names to arrays of equal length (one row per example). Each epoch draws one
    permutation shared by all ranks (seeded by seed and epoch); global batch i holds examples
    [i*B*W, (i+1)*B*W) of it and rank r takes slice r, so W processes with B each see exactly what
    one process with B*W sees, every rank gets the same number of batches, and the last partial
    global batch is dropped.
    """

    def __init__(self, arrays: dict, batch_size: int, rank: int, world_size: int, seed: int,
                 where: str | None = None, convert: Callable[[dict], Any] = lambda batch: batch) -> None:
        self.arrays, self.batch_size, self.rank, self.world = arrays, batch_size, rank, world_size
        self.convert = convert  # e.g. numpy -> paddle tensors, so it counts as reader time
        self.seed, self.epoch = seed, 0
        self.global_batch = batch_size * world_size
        self.examples = len(next(iter(arrays.values())))
        if self.examples < self.global_batch:
            raise DataError(f"{where or 'synthetic data'}: {self.examples} examples are fewer "
                            f"than one global batch ({batch_size} per rank x {world_size} ranks)")

    def __len__(self) -> int:
        return self.examples // self.global_batch

    def __iter__(self) -> Iterator:
        import numpy as np  # here, not at the top: the Criteo pipe processes import this package

        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.examples)
        self.epoch += 1
        for i in range(len(self)):
            start = i * self.global_batch + self.rank * self.batch_size
            index = order[start:start + self.batch_size]
            yield self.convert({k: v[index] for k, v in self.arrays.items()})
