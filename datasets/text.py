"""Token streams for the GPT benchmark: a tokenised text file, or a synthetic stream.

    fleetbench data gen text --out FILE.npy [--text FILE]

The tokenizer is bytes: every UTF-8 byte is a token (vocabulary 256), the simplest one that loses
nothing and needs no download (a real BPE vocabulary would change the embedding's size, not what a
step computes). Without --text the corpus is Python's own documentation, `pydoc_data.topics` (the
text `help()` shows, shipped with CPython in every install: about 0.8 MB of English), so a real
text is always at hand. FILE.npy holds the ids as a 1-D uint8 array.

Synthetic (no data.path): a stream from a fixed random Markov chain in which every token has two
likely successors (`synthetic`), so a model can learn it: the loss falls from ln(vocabulary)
towards ln(2), which a random stream would not show. Both give a data-parallel rank its own
windows of seq_len + 1 tokens (inputs and the next-token labels): of a file, rank r takes every
world-th window from the r-th on (`windows`); synthetic windows are walks of the rank's own.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fleetbench import cmdline

BYTE_VOCAB = 256


class DataError(cmdline.UserError):
    """A token file that cannot be read as the model needs; one line naming it."""


def corpus_text() -> str:
    from pydoc_data import topics

    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))


def tokenize(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def load(path: str, vocab_size: int, seq_len: int) -> np.ndarray:
    """The ids of a token file, checked against the model's vocabulary and sequence length."""
    try:
        ids = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: not a token file (.npy of ids: {err})") from None
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise DataError(f"{path}: expected a 1-D array of integer token ids (got {ids.dtype} of shape {ids.shape})")
    if ids.size and int(ids.max()) >= vocab_size:
        raise DataError(f"{path}: token id {int(ids.max())} is outside the model's vocabulary ({vocab_size}); "
                        f"byte-level files need vocab_size >= {BYTE_VOCAB}")
    if ids.size < 2 * (seq_len + 1):
        raise DataError(f"{path}: {ids.size} tokens, fewer than two sequences of seq_len + 1 ({seq_len + 1})")
    return ids


def synthetic(count: int, length: int, vocab_size: int, seed: int, rank: int = 0) -> np.ndarray:
    """[count, length] windows of a learnable stream (module doc): the chain (each token's two
    successors) is the seed's, shared by every rank; the walks are the rank's own."""
    successors = np.random.default_rng(seed).integers(0, vocab_size, size=(vocab_size, 2))
    rng = np.random.default_rng([seed, rank + 1])
    out = np.empty((count, length), dtype=np.int64)
    out[:, 0] = rng.integers(0, vocab_size, size=count)
    picks = rng.integers(0, 2, size=(count, length))
    for i in range(1, length):  # vectorised over the windows
        out[:, i] = successors[out[:, i - 1], picks[:, i]]
    return out


def windows(ids: np.ndarray, seq_len: int, rank: int, world: int) -> np.ndarray:
    """This rank's [n, seq_len + 1] windows (module doc)."""
    n = ids.size // (seq_len + 1)
    all_windows = ids[: n * (seq_len + 1)].reshape(n, seq_len + 1).astype(np.int64)
    return all_windows[rank::world]


def gen_parser() -> argparse.ArgumentParser:
    from fleetbench import cmdline

    p = cmdline.Parser(prog="fleetbench data gen text", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=cmdline.OUTPUT_FILE, help="the .npy file to write")
    p.add_argument("--text", type=cmdline.INPUT_FILE, help="a UTF-8 text file (default: Python's documentation)")
    return p


def cli(argv: list | None = None) -> int:
    args = gen_parser().parse_args(argv)
    text = Path(args.text).read_text(encoding="utf-8", errors="replace") if args.text else corpus_text()
    ids = tokenize(text)
    np.save(args.out, ids)
    print(f"wrote {args.out}: {ids.size} byte tokens (vocabulary {BYTE_VOCAB}) from "
          f"{args.text or 'pydoc_data.topics'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(cli())
