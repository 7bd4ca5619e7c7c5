"""The synthetic image task (datasets/images.py) as Fleet's parameter server reads it.

Fleet's datasets take text in its MultiSlot format through a data-generator process
(`cat FILE | PIPE`); a slot declared dense (lod_level 0) of width D takes `D v1 ... vD`. An image
is one dense float slot of D = 3 x size x size values (NCHW order), then the label slot:

    768 0.4178 -1.204 ... 0.0312 1 7

A data file holds one line per batch, `RANK BATCH`: batch BATCH of the arrays
`images.synthetic_arrays` makes for rank RANK, which the pipe renders. So the files are a few
bytes per batch, and parameter-server worker r trains exactly the batches (to 6 significant
digits) that collective rank r trains from the same seed. Each distinct batch is rendered once
per pipe process (batches repeat: a run cycles `synthetic_batches` of them).
"""
from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from datasets import append_counts, images

if TYPE_CHECKING:  # numpy is imported where it is used: the pipe processes start without it
    import numpy as np


def render(pixels: np.ndarray, labels: np.ndarray) -> str:
    """MultiSlot lines of a batch: (B, 3, S, S) float pixels and (B,) integer labels."""
    import numpy as np
    flat = pixels.reshape(len(labels), -1)
    rows = np.column_stack([np.full(len(labels), flat.shape[1]), flat, np.ones(len(labels)), labels])
    out = io.StringIO()
    np.savetxt(out, rows, fmt="%.6g")  # widths and labels are integers: %g writes them so
    return out.getvalue()


class Renderer:
    """`RANK BATCH` -> that batch's MultiSlot lines; None for a line that names no batch."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.arrays, self.text = args, {}, {}

    def __call__(self, line: bytes) -> str | None:
        try:
            rank, batch = (int(word) for word in line.split())
        except ValueError:
            return None
        if rank < 0 or not 0 <= batch < self.args.batches:
            return None
        if (rank, batch) not in self.text:
            if rank not in self.arrays:
                a = self.args
                self.arrays[rank] = images.synthetic_arrays(a.batches, a.batch_size, a.image_size, a.num_classes,
                                                            a.seed, rank, a.noise)
            self.text[(rank, batch)] = render(*self.arrays[rank][batch])
        return self.text[(rank, batch)]


def pipe(stdin: Iterable[bytes], stdout: IO[str], args: argparse.Namespace) -> dict:
    """Fleet's pipe_command: `RANK BATCH` lines in, MultiSlot examples out; the counts of examples
    written and lines skipped go to args.stats (as the Criteo pipe's, read by the PS driver)."""
    render_batch = Renderer(args)
    valid = invalid = 0
    for raw in stdin:
        text = render_batch(raw)
        if text is None:
            invalid += 1
            continue
        valid += args.batch_size
        stdout.write(text)
    stdout.flush()
    counts = {"valid": valid, "invalid": invalid}
    if args.stats:
        append_counts(args.stats, counts)
    return counts


def write_files(out: str | Path, workers: int, steps: int, batches: int) -> list:
    """One file per worker (`part-0000W`): its `steps` batches, cycling through `batches`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for worker in range(workers):
        path = out / f"part-{worker:05d}"
        path.write_text("".join(f"{worker} {step % batches}\n" for step in range(steps)))
        paths.append(path)
    return paths


def pipe_args(image_size: int, num_classes: int, batch_size: int, batches: int, seed: int, noise: float) -> list:
    """The pipe's command-line arguments for a configuration (what `main` parses)."""
    return ["pipe", "--image-size", image_size, "--num-classes", num_classes, "--batch-size", batch_size,
            "--batches", batches, "--seed", seed, "--noise", noise]


def main(argv: list[str] | None = None) -> int:
    """`python -m datasets.image_slots pipe --image-size S --num-classes C --batch-size B
    --batches K --seed SEED --noise X [--stats FILE]`."""
    parser = argparse.ArgumentParser(prog="python -m datasets.image_slots")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pipe", help="RANK BATCH lines on stdin -> MultiSlot image examples on stdout")
    for flag in ("--image-size", "--num-classes", "--batch-size", "--batches", "--seed"):
        p.add_argument(flag, type=int, required=True)
    p.add_argument("--noise", type=float, required=True)
    p.add_argument("--stats", default=None, help="append the valid/invalid counts to this file")
    args = parser.parse_args(argv)
    pipe(sys.stdin.buffer, sys.stdout, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
