"""BERT pretraining data: a documented pre-tokenized format, its reader and a generator.

Format (one `.npz` file, or a directory of them read in name order), N examples of S tokens:

    input_ids             int32   [N, S]  token ids; 0 is padding, ids < vocab_size
    segment_ids           int32   [N, S]  0 = sentence A (and padding), 1 = sentence B
    masked_positions      int32   [N, P]  positions (< S) of the masked tokens, 0 where unused
    masked_labels         int32   [N, P]  original ids at those positions, 0 where unused
    masked_weights        float32 [N, P]  1.0 for a real prediction, 0.0 for an unused slot
    next_sentence_labels  int32   [N]     0 = B follows A, 1 = B is a random sentence
    vocab_size            int64   []      size of the vocabulary the ids were made with

This is what BERT's create_pretraining_data writes as TFRecords, as numpy arrays: tokenization,
masking (15% of tokens, at most P per example) and next-sentence pairing are done before training.
The reader checks every array against the model's vocab/sequence/prediction sizes and rejects
malformed input with a one-line error naming the file.

Batches (datasets.Batches) are cut from a global order shared by all ranks: global batch i holds examples
[i*B*W, (i+1)*B*W) of an epoch's permutation and rank r takes slice r, so W processes with B each
see exactly what one process with B*W sees (the methods tests rely on this).
"""
import argparse
import functools
from pathlib import Path
from typing import NoReturn

import numpy as np

from datasets import Batches, DataError, add_out_argument, out_path  # noqa: F401  (bert.Batches: the shared batcher)

PAD, CLS, SEP, MASK = 0, 1, 2, 3  # special ids of generated data; words are ids >= FIRST_WORD
FIRST_WORD = 4
INT_KEYS = ("input_ids", "segment_ids", "masked_positions", "masked_labels", "next_sentence_labels")
KEYS = INT_KEYS + ("masked_weights", "vocab_size")



def generate(n: int, seq_len: int, vocab_size: int, max_predictions: int, seed: int = 0,
             short_seq_prob: float = 0.1) -> dict:
    """N synthetic examples in the format above: [CLS] A [SEP] B [SEP] + padding, 15% masked.

    Sentence B continues A (label 0) or is drawn independently (label 1); words follow a Zipf-like
    distribution so the masked-LM loss can fall below log(vocab) as a real corpus' would.
    """
    if seq_len < 8 or vocab_size <= FIRST_WORD or max_predictions < 1:
        raise ValueError("need seq_len >= 8, vocab_size > 4 and max_predictions >= 1")
    rng = np.random.default_rng(seed)
    words = vocab_size - FIRST_WORD
    zipf = 1.0 / np.arange(1, words + 1)
    zipf /= zipf.sum()
    out = {k: np.zeros((n, seq_len), np.int32) for k in ("input_ids", "segment_ids")}
    for k in ("masked_positions", "masked_labels"):
        out[k] = np.zeros((n, max_predictions), np.int32)
    out["masked_weights"] = np.zeros((n, max_predictions), np.float32)
    out["next_sentence_labels"] = rng.integers(0, 2, n).astype(np.int32)
    for i in range(n):
        length = seq_len if rng.random() >= short_seq_prob else int(rng.integers(8, seq_len + 1))
        len_a = int(rng.integers(1, length - 4 + 1))
        len_b = length - 3 - len_a
        text = rng.choice(words, size=len_a + len_b, p=zipf) + FIRST_WORD
        if out["next_sentence_labels"][i] == 0:  # B continues A: reuse A's words, shifted
            text[len_a:] = np.resize(text[:len_a], len_b)
        ids = np.concatenate([[CLS], text[:len_a], [SEP], text[len_a:], [SEP]])
        out["input_ids"][i, :length] = ids
        out["segment_ids"][i, len_a + 2:length] = 1
        candidates = np.flatnonzero(ids >= FIRST_WORD)
        count = min(max_predictions, max(1, int(round(0.15 * len(candidates)))))
        positions = np.sort(rng.choice(candidates, size=count, replace=False))
        out["masked_positions"][i, :count] = positions
        out["masked_labels"][i, :count] = ids[positions]
        out["masked_weights"][i, :count] = 1.0
        out["input_ids"][i, positions] = MASK
    out["vocab_size"] = np.int64(vocab_size)
    return out


def write(path: str | Path, arrays: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:  # a file object keeps numpy from appending ".npz" to the name
        np.savez(f, **arrays)
    return path


def validate(arrays: dict, where: str | Path, vocab_size: int, seq_len: int, max_predictions: int) -> None:
    """Raise DataError(one line naming `where`) unless `arrays` is a well-formed shard for the model."""
    def fail(msg: str) -> NoReturn:
        raise DataError(f"{where}: {msg}")

    missing = [k for k in KEYS if k not in arrays]
    if missing:
        fail(f"missing array(s) {', '.join(missing)} (expected {', '.join(KEYS)})")
    n = len(arrays["next_sentence_labels"]) if np.ndim(arrays["next_sentence_labels"]) == 1 else -1
    if n <= 0:
        fail("no examples (next_sentence_labels must be a non-empty 1-D array)")
    shapes = {"input_ids": (n, seq_len), "segment_ids": (n, seq_len)}
    shapes.update({k: (n, max_predictions) for k in ("masked_positions", "masked_labels", "masked_weights")})
    for key, shape in shapes.items():
        if arrays[key].shape != shape:
            fail(f"{key} has shape {arrays[key].shape}, expected {shape} (N examples x seq_len "
                 f"{seq_len} / max_predictions {max_predictions})")
    for key in INT_KEYS:
        if not np.issubdtype(arrays[key].dtype, np.integer):
            fail(f"{key} has dtype {arrays[key].dtype}, expected integers")
    if int(arrays["vocab_size"]) > vocab_size:
        fail(f"made with vocab_size {int(arrays['vocab_size'])}, larger than the model's {vocab_size}")
    checks = [("input_ids", 0, vocab_size), ("masked_labels", 0, vocab_size), ("segment_ids", 0, 2),
              ("masked_positions", 0, seq_len), ("next_sentence_labels", 0, 2)]
    for key, low, high in checks:
        values = arrays[key]
        bad = np.flatnonzero((values < low) | (values >= high))
        if bad.size:
            fail(f"{key} holds {values.flat[bad[0]]} at flat index {bad[0]}, expected {low} <= id < {high}")
    weights = arrays["masked_weights"]
    if not np.isin(weights, (0.0, 1.0)).all():
        fail("masked_weights must hold only 0.0 and 1.0")
    if not (weights.sum(axis=1) > 0).all():
        fail(f"example {int(np.flatnonzero(weights.sum(axis=1) == 0)[0])} has no masked prediction")


def shard_files(path: str | Path) -> list:
    root = Path(path)
    files = sorted(root.glob("*.npz")) if root.is_dir() else [root]
    if root.is_dir() and not files:
        raise DataError(f"{root}: no .npz files in this directory")
    return files


@functools.lru_cache(maxsize=1)  # config validation and build() both read it; load once per process
def load(path: str | Path, vocab_size: int, seq_len: int, max_predictions: int) -> dict:
    """Read and validate a file or a directory of `.npz` shards; arrays of all shards concatenated."""
    parts = []
    for file in shard_files(path):
        if not file.exists():
            raise DataError(f"{file}: no such file")
        if file.stat().st_size == 0:
            raise DataError(f"{file}: empty file (expected a BERT pretraining .npz, see datasets/bert.py)")
        try:
            with np.load(file, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as err:  # not a zip / not numpy data
            raise DataError(f"{file}: not a numpy .npz archive ({str(err).splitlines()[0]})") from None
        validate(arrays, file, vocab_size, seq_len, max_predictions)
        parts.append(arrays)
    return {k: np.concatenate([p[k] for p in parts]) for k in KEYS if k != "vocab_size"}


def source(path: str | None, synthetic_examples: int, vocab_size: int, seq_len: int, max_predictions: int,
           seed: int) -> dict:
    """The validated data at `path`, or `synthetic_examples` generated in memory when path is None.

    Synthetic examples are packed to full length (as pretraining data mostly is), so every rank's
    batch holds the same number of masked predictions and per-rank mean losses average exactly
    to the global one.
    """
    if path:
        return load(path, vocab_size, seq_len, max_predictions)
    arrays = generate(synthetic_examples, seq_len, vocab_size, max_predictions, seed, short_seq_prob=0.0)
    arrays.pop("vocab_size")
    return arrays


def gen_parser() -> argparse.ArgumentParser:
    from fleetbench import cmdline  # the shared parser: one-line errors, typed flags

    p = cmdline.Parser(prog="fleetbench data gen bert", description="write synthetic BERT pretraining data (.npz)")
    add_out_argument(p, "output .npz file", cmdline.OUTPUT_FILE)
    p.add_argument("--examples", type=cmdline.COUNT, default=1024)
    p.add_argument("--seq-len", type=cmdline.integer(8), default=128)
    p.add_argument("--vocab-size", type=cmdline.integer(5), default=30522)
    p.add_argument("--max-predictions", type=cmdline.COUNT, default=20)
    p.add_argument("--seed", type=cmdline.SEED, default=0)
    return p


def cli(argv: list[str] | None = None) -> int:
    """`fleetbench data gen bert --out OUT.npz ...`: write a synthetic shard in the format above."""
    parser = gen_parser()
    args = parser.parse_args(argv)
    try:
        arrays = generate(args.examples, args.seq_len, args.vocab_size, args.max_predictions, args.seed)
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {args.examples} examples (seq_len {args.seq_len}) to {write(out_path(parser, args), arrays)}")
    return 0
