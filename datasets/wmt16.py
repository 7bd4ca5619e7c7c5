"""WMT16 en-de for the Transformer: tokenized parallel files with a vocabulary, batched by tokens.

Format: a directory holding three UTF-8 text files:

    vocab.txt   one token per line; the line number (from 0) is the token's id. The first four
                lines are the special tokens <pad> <s> </s> <unk> (ids 0-3). One vocabulary is
                shared by both languages (joint BPE, as in the Transformer paper).
    train.src   one source (English) sentence per line: its BPE token ids, separated by spaces
    train.tgt   the target (German) sentence on the same line number, in the same form

Sentences carry no <s>/</s>; the reader adds them. Pairs longer than `max_len` tokens on either
side are skipped (and counted), as Paddle's and fairseq's WMT readers do. Anything else that is
not a well-formed pair (an empty file or line, a non-integer, an id >= the vocabulary size, line
counts that differ) is rejected with a one-line error naming the file and line.

Batches are built by token budget: pairs are sorted by length and cut so that a batch's padded
size (pairs x longest side + 1) stays within `max_tokens` per device (FleetX: 4096); batches
are shuffled each epoch and dealt round-robin to ranks, every rank getting the same count.
"""
import argparse
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from datasets import DataError, add_out_argument, out_path

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
FILES = ("vocab.txt", "train.src", "train.tgt")
Pair = tuple[np.ndarray, np.ndarray]  # (source ids, target ids) of one sentence pair



def _nonempty_lines(path: Path, expected: str) -> list:
    """The lines of a text file, or a one-line DataError when it is missing or empty."""
    if not path.is_file():
        raise DataError(f"{path}: no such file (expected {expected})")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise DataError(f"{path}: empty file (expected {expected})")
    return lines


def read_vocab(path: str | Path) -> int:
    """Size of the vocabulary in `path` after checking its special tokens."""
    path = Path(path)
    tokens = _nonempty_lines(path, f"one token per line, starting {' '.join(SPECIALS)}")
    if tuple(tokens[:4]) != SPECIALS:
        raise DataError(f"{path}: the first four tokens must be {' '.join(SPECIALS)} "
                        f"(got {' '.join(tokens[:4])})")
    return len(tokens)


def read_ids(path: str | Path, vocab_size: int) -> list:
    """Every line of `path` as an int32 array of ids in [0, vocab_size)."""
    path = Path(path)
    lines = _nonempty_lines(path, "token ids, one sentence per line")
    sentences = []
    for number, line in enumerate(lines, 1):
        try:
            ids = np.array(line.split(), dtype=np.int64)
        except ValueError:
            raise DataError(f"{path}:{number}: not a line of integer token ids ({line[:40]!r})") from None
        if ids.size == 0:
            raise DataError(f"{path}:{number}: empty sentence")
        bad = ids[(ids < 0) | (ids >= vocab_size)]
        if bad.size:
            raise DataError(f"{path}:{number}: token id {bad[0]} outside the vocabulary "
                            f"(0 <= id < {vocab_size})")
        sentences.append(ids.astype(np.int32))
    return sentences


@functools.lru_cache(maxsize=1)  # config validation and build() both read it; parse once per process
def load(path: str | Path, max_len: int) -> tuple[int, list[Pair], int]:
    """(vocab_size, pairs, skipped) from a WMT16 directory; pairs longer than max_len are skipped."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory (expected {', '.join(FILES)})")
    vocab_size = read_vocab(root / "vocab.txt")
    src, tgt = (read_ids(root / name, vocab_size) for name in FILES[1:])
    if len(src) != len(tgt):
        raise DataError(f"{root / 'train.tgt'}: {len(tgt)} lines but train.src has {len(src)} (expected one "
                        "target per source line)")
    pairs = [(s, t) for s, t in zip(src, tgt) if len(s) <= max_len and len(t) <= max_len]
    if not pairs:
        raise DataError(f"{root / 'train.src'}: every pair is longer than max_len {max_len}")
    return vocab_size, pairs, len(src) - len(pairs)


def source(path: str | None, max_len: int, synthetic_pairs: int, vocab_size: int, seed: int) -> list[Pair]:
    """The pairs of the directory at `path` (saying how many were skipped), else synthetic pairs."""
    if not path:
        return generate(synthetic_pairs, vocab_size, max_len, seed)
    _, pairs, skipped = load(path, max_len)
    print(f"{path}: {len(pairs)} sentence pairs; {skipped} longer than {max_len} tokens skipped", flush=True)
    return pairs


def generate(n: int, vocab_size: int, max_len: int, seed: int = 0) -> list[Pair]:
    """N synthetic pairs: the target is a fixed token-wise mapping of the source, locally reordered,
    so a Transformer can learn it; lengths follow a WMT-like skewed distribution."""
    if vocab_size <= len(SPECIALS) + 1 or max_len < 1:
        raise ValueError("need vocab_size > 5 and max_len >= 1")
    rng = np.random.default_rng(seed)
    words = np.arange(len(SPECIALS), vocab_size)
    mapping = np.concatenate([np.arange(len(SPECIALS)), rng.permutation(words)])
    lengths = np.clip(rng.gamma(2.0, max_len / 5, size=n).astype(int) + 1, 1, max_len)
    pairs = []
    for length in lengths:
        src = rng.choice(words, size=length).astype(np.int32)
        tgt = mapping[src]
        starts = np.arange(0, length - 1, 2)
        swap = starts[rng.random(starts.size) < 0.3]  # swap ~30% of neighbouring pairs
        tgt[swap], tgt[swap + 1] = tgt[swap + 1], tgt[swap].copy()
        pairs.append((src, tgt.astype(np.int32)))
    return pairs


def write(out: str | Path, pairs: list[Pair], vocab_size: int) -> Path:
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    tokens = list(SPECIALS) + [f"w{i}" for i in range(len(SPECIALS), vocab_size)]
    (root / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    for name, side in (("train.src", 0), ("train.tgt", 1)):
        lines = (" ".join(map(str, pair[side])) + "\n" for pair in pairs)
        (root / name).write_text("".join(lines), encoding="utf-8")
    return root


def token_batches(pairs: list[Pair], max_tokens: int, rng: np.random.Generator) -> list:
    """Index lists whose padded size (count x (longest side + 1)) fits max_tokens."""
    lengths = np.array([max(len(s), len(t)) + 1 for s, t in pairs])  # +1: </s> or <s>
    order = rng.permutation(len(pairs))
    order = order[np.argsort(lengths[order], kind="stable")]  # by length, ties in random order
    batches, current, longest = [], [], 0
    for i in order:
        if current and (len(current) + 1) * max(longest, lengths[i]) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, lengths[i])
    batches.append(current)
    return [batches[i] for i in rng.permutation(len(batches))]


def pad(sequences: list[np.ndarray], length: int) -> np.ndarray:
    out = np.full((len(sequences), length), PAD, np.int64)
    for row, seq in enumerate(sequences):
        out[row, :len(seq)] = seq
    return out


def collate(pairs: list[Pair]) -> dict:
    """src + </s>; decoder input <s> + tgt; labels tgt + </s>; all padded with <pad>."""
    src = [np.append(s, EOS) for s, _ in pairs]
    tgt_in = [np.insert(t, 0, BOS) for _, t in pairs]
    tgt_out = [np.append(t, EOS) for _, t in pairs]
    longest = max(map(len, tgt_in))
    return {"src": pad(src, max(map(len, src))), "tgt_in": pad(tgt_in, longest),
            "tgt_out": pad(tgt_out, longest)}


class Batches:
    """Re-iterable: one pass is an epoch of this rank's token-budget batches."""

    def __init__(self, pairs: list[Pair], max_tokens: int, rank: int, world_size: int, seed: int,
                 where: str | None = None, convert: Callable[[dict], Any] = lambda b: b) -> None:
        self.pairs, self.max_tokens, self.rank, self.world = pairs, max_tokens, rank, world_size
        self.seed, self.epoch, self.convert = seed, 0, convert
        if len(token_batches(pairs, max_tokens, np.random.default_rng(seed))) < world_size:
            raise DataError(f"{where or 'synthetic data'}: {len(pairs)} pairs make fewer batches of "
                            f"{max_tokens} tokens than there are ranks ({world_size})")

    def __iter__(self) -> Iterator:
        batches = token_batches(self.pairs, self.max_tokens, np.random.default_rng([self.seed, self.epoch]))
        self.epoch += 1
        per_rank = len(batches) // self.world  # equal counts: no rank waits at an all-reduce alone
        for index in batches[self.rank::self.world][:per_rank]:
            yield self.convert(collate([self.pairs[i] for i in index]))


def gen_parser() -> argparse.ArgumentParser:
    from fleetbench import cmdline  # the shared parser: one-line errors, typed flags

    p = cmdline.Parser(prog="fleetbench data gen wmt16", description="write synthetic WMT16-format parallel data")
    add_out_argument(p, "output directory (vocab.txt, train.src, train.tgt)", cmdline.OUTPUT_DIR)
    p.add_argument("--pairs", type=cmdline.COUNT, default=10000)
    p.add_argument("--vocab-size", type=cmdline.integer(6), default=37000)
    p.add_argument("--max-len", type=cmdline.COUNT, default=100, help="longest sentence, in tokens")
    p.add_argument("--seed", type=cmdline.SEED, default=0)
    return p


def cli(argv: list[str] | None = None) -> int:
    """`fleetbench data gen wmt16 --out OUT_DIR ...`: write synthetic data in the format above."""
    parser = gen_parser()
    args = parser.parse_args(argv)
    try:
        pairs = generate(args.pairs, args.vocab_size, args.max_len, args.seed)
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {args.pairs} sentence pairs to {write(out_path(parser, args), pairs, args.vocab_size)}")
    return 0
