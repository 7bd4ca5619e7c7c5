"""1-Billion-word-style text for skip-gram Word2Vec: preprocessing, a Zipfian synthetic corpus,
and the data-generator process that turns id lines into training pairs.

Preprocessing (what the benchmark trains on), from UTF-8 text with one sentence per line:
    tokenise   lower-case, split on whitespace (the 1-Billion-word corpus is already tokenised,
               punctuation separated by spaces)
    count      occurrences of every token
    dictionary tokens seen >= min_count times, most frequent first (ties by token), written as
               `dict.txt`: one `token count` per line; a token's id is its line number from 0
    ids        `ids/part-NNNNN`: each sentence as its in-dictionary ids separated by spaces
               (out-of-dictionary tokens are dropped, as word2vec.c does); sentences with fewer
               than two ids are dropped; lines dealt round-robin into K files

Training examples (the pipe): for every sentence, each word is kept with word2vec.c's sub-sampling
probability (sqrt(f / (t N)) + 1) (t N) / f, with f its count, N the corpus size and t = `sample`;
each kept word is a centre whose contexts are the words within a window drawn uniformly from
1..`window` on each side; each (centre, context) pair gets `neg` negatives drawn from the unigram
distribution raised to 0.75. A line that is not space-separated ids below the dictionary size is
invalid (skipped and counted).
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where it is used: the pipe processes start without it
    import numpy as np

SLOTS = ["center", "context", "negatives", "words"]
_IDS = re.compile(rb"[0-9]+(?: [0-9]+)*")


# ------------------------------------------------------------------ preprocessing
def tokenise(line: str) -> list:
    return line.lower().split()


def count_words(paths: Iterable[str | Path]) -> Counter:
    counts = Counter()
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                counts.update(tokenise(line))
    return counts


def build_dictionary(counts: Counter, min_count: int) -> list:
    """[(token, count)] with count >= min_count, most frequent first, ties broken by token."""
    return sorted(((w, c) for w, c in counts.items() if c >= min_count), key=lambda wc: (-wc[1], wc[0]))


def write_dictionary(path: str | Path, dictionary: list[tuple[str, int]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{word} {count}\n" for word, count in dictionary)


def read_counts(path: str | Path) -> list:
    """The counts column of a dictionary file, in id order."""
    counts = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise ValueError(f"{path}:{number}: expected `token count`, got {line.rstrip()!r}")
            counts.append(int(parts[1]))
    if not counts:
        raise ValueError(f"{path}: empty dictionary")
    return counts


def preprocess(text_paths: Sequence[str | Path], out: str | Path, min_count: int = 5, files: int = 1) -> dict:
    """Text files -> `out/dict.txt` and `out/ids/part-*`. Returns counts of what was written."""
    out = Path(out)
    (out / "ids").mkdir(parents=True, exist_ok=True)
    dictionary = build_dictionary(count_words(text_paths), min_count)
    if not dictionary:
        raise ValueError(f"no token occurs {min_count} times or more; lower min_count")
    write_dictionary(out / "dict.txt", dictionary)
    ids = {word: i for i, (word, _) in enumerate(dictionary)}
    handles = [open(out / "ids" / f"part-{k:05d}", "w") for k in range(files)]
    sentences = words = 0
    try:
        for path in text_paths:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    row = [ids[w] for w in tokenise(line) if w in ids]
                    if len(row) < 2:
                        continue
                    handles[sentences % files].write(" ".join(map(str, row)) + "\n")
                    sentences += 1
                    words += len(row)
    finally:
        for h in handles:
            h.close()
    return {"vocabulary": len(dictionary), "sentences": sentences, "words": words}


# ------------------------------------------------------------------ synthetic corpus
def synthetic_corpus(path: str | Path, sentences: int, vocabulary: int = 10000, seed: int = 0,
                     topics: int = 50) -> None:
    """Text whose word frequencies follow Zipf's law (rank r has weight 1/r), with structure to
    learn: each sentence has a topic, and half its words come from that topic's own words."""
    import numpy as np
    rng = np.random.default_rng([seed, 0x77])
    words = np.array([f"w{i}" for i in range(vocabulary)])
    zipf = 1.0 / np.arange(1, vocabulary + 1)
    zipf /= zipf.sum()
    topic_words = np.array_split(rng.permutation(vocabulary), topics)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(sentences):
            length = int(rng.integers(5, 30))
            own = topic_words[int(rng.integers(topics))]
            background = rng.choice(vocabulary, size=length, p=zipf)
            local = own[np.minimum(rng.zipf(1.5, length) - 1, len(own) - 1)]
            choose = rng.random(length) < 0.5
            handle.write(" ".join(words[np.where(choose, local, background)]) + "\n")


def generate(out: str | Path, sentences: int, vocabulary: int = 10000, files: int = 1, min_count: int = 5,
             seed: int = 0) -> dict:
    """A synthetic corpus in `out/corpus.txt`, preprocessed into `out/dict.txt` and `out/ids/`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    synthetic_corpus(out / "corpus.txt", sentences, vocabulary, seed)
    return preprocess([out / "corpus.txt"], out, min_count, files)


def id_files(path: str | Path) -> list:
    """The id files of a preprocessed directory `path` (holding dict.txt and ids/)."""
    path = Path(path)
    if not (path / "dict.txt").is_file():
        raise ValueError(f"{path}: expected a preprocessed directory with dict.txt and ids/ "
                         f"(make one with `fleetbench data gen word2vec`)")
    files = sorted(p for p in (path / "ids").glob("part-*") if p.is_file())
    if not files:
        raise ValueError(f"{path / 'ids'}: no id files (part-*)")
    return files


# ------------------------------------------------------------------ sampling
def keep_probabilities(counts: Sequence[int], sample: float) -> list:
    """word2vec.c's sub-sampling: probability of keeping each word (capped at 1)."""
    total = float(sum(counts))
    threshold = sample * total
    return [1.0 if sample <= 0 else min(1.0, (math.sqrt(c / threshold) + 1) * threshold / c) if c else 0.0
            for c in counts]


def negative_table(counts: Sequence[int], power: float = 0.75) -> list:
    """Cumulative unigram^power distribution over ids (sample by searching it for uniform draws)."""
    weights = [c ** power for c in counts]
    total = sum(weights)
    return list(itertools.accumulate(w / total for w in weights))


def parse_ids(raw: bytes, vocabulary: int) -> tuple[list[int] | None, str | None]:
    """(ids, None) for a valid id line, (None, reason) otherwise."""
    line = raw.rstrip(b"\r\n")
    if not _IDS.fullmatch(line):
        return None, "expected ids separated by single spaces"
    ids = list(map(int, line.split()))
    if max(ids) >= vocabulary:
        return None, f"id >= dictionary size {vocabulary}"
    return ids, None


def check_line(raw: bytes, vocabulary: int) -> str | None:
    return parse_ids(raw, vocabulary)[1]


def first_error(paths: Iterable[str | Path], vocabulary: int) -> str | None:
    for path in paths:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                reason = check_line(raw, vocabulary)
                if reason:
                    return f"{path}:{number}: {reason}"
    return None


class PairMaker:
    """Sentences of ids -> training pairs as MultiSlot lines; all randomness from one seed.
    Vectorised with numpy over blocks of sentences (a pipe must outrun training, see bench/)."""

    def __init__(self, counts: Sequence[int], window: int, neg: int, sample: float, seed: int | list[int]) -> None:
        import numpy as np
        self.np, self.window, self.neg = np, window, neg
        self.keep = np.array(keep_probabilities(counts, sample))
        self.table = np.array(negative_table(counts))
        self.last = len(counts) - 1
        self.rng = np.random.default_rng(seed)

    def negatives(self, n: int) -> np.ndarray:
        """n x neg ids drawn from the unigram^0.75 table."""
        return self.np.minimum(self.np.searchsorted(self.table, self.rng.random((n, self.neg))), self.last)

    def block_pairs(self, sentences: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(sentence index, centre, context, negatives) arrays for a block of sentences, in
        sentence order: each word kept with its sub-sampling probability is a centre; its
        contexts are the kept words of the same sentence within a window drawn from 1..window."""
        np, rng = self.np, self.rng
        lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        ids = np.fromiter(itertools.chain.from_iterable(sentences), dtype=np.int64, count=int(lengths.sum()))
        sid = np.repeat(np.arange(len(sentences)), lengths)
        kept = rng.random(len(ids)) < self.keep[ids]
        ids, sid = ids[kept], sid[kept]
        spans = rng.integers(1, self.window + 1, len(ids))
        centres, contexts = [], []
        for offset in range(1, min(self.window, len(ids) - 1) + 1):
            same = sid[:-offset] == sid[offset:]
            right = np.nonzero(same & (spans[:-offset] >= offset))[0]  # centre i, context i + offset
            left = np.nonzero(same & (spans[offset:] >= offset))[0] + offset  # centre j, context j - offset
            centres += [right, left]
            contexts += [right + offset, left - offset]
        if not centres:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, np.zeros((0, self.neg), dtype=np.int64)
        centres, contexts = np.concatenate(centres), np.concatenate(contexts)
        order = np.argsort(sid[centres], kind="stable")
        centres, contexts = centres[order], contexts[order]
        return sid[centres], ids[centres], ids[contexts], self.negatives(len(centres))

    def pairs(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(centres, contexts, negatives) of one sentence."""
        return self.block_pairs([ids])[1:]

    def lines(self, sentences: list, carry: int = 0) -> tuple[str, int]:
        """(MultiSlot text of a block's pairs, words not yet put on a pair). The words slot of a
        sentence's first pair holds its word count plus the words of preceding sentences that
        yielded no pair (and `carry`, words from earlier blocks)."""
        np = self.np
        sid, centres, contexts, negatives = self.block_pairs(sentences)
        cum = np.cumsum([len(s) for s in sentences]) + carry
        if not len(sid):
            return "", int(cum[-1]) if len(cum) else carry
        words = np.zeros(len(sid), dtype=np.int64)
        firsts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])  # first pair of each sentence with pairs
        upto = cum[sid[firsts]]
        words[firsts] = np.diff(np.r_[0, upto])
        left = int(cum[-1] - upto[-1])
        columns = [centres, contexts, *negatives.T, words]
        strings = [list(map(str, c.tolist())) for c in columns]
        one, neg = itertools.repeat("1"), itertools.repeat(str(self.neg))
        rows = zip(one, strings[0], one, strings[1], neg, *strings[2:-1], one, strings[-1])
        return "\n".join(map(" ".join, rows)) + "\n", left


def pipe(stdin: Iterator[bytes], stdout: IO[str], counts: Sequence[int], *, window: int = 5, neg: int = 5,
         sample: float = 1e-3, seed: int = 0, stats_path: str | None = None, block: int = 2000) -> dict:
    """Fleet's pipe_command: id lines in, MultiSlot pairs out (slots `SLOTS`). The `words` slot
    carries each sentence's word count on its first pair (carried to the next pair when a
    sentence yields none), so summing it over the batches a trainer consumed counts corpus words
    read, sub-sampled ones included, as word2vec.c reports words/s."""
    maker = None
    stats = {"valid": 0, "invalid": 0, "words": 0, "pairs": 0}
    carry, vocabulary = 0, len(counts)
    for raws in iter(lambda: list(itertools.islice(stdin, block)), []):
        sentences = []
        for raw in raws:
            ids, problem = parse_ids(raw, vocabulary)
            if problem:
                stats["invalid"] += 1
            else:
                sentences.append(ids)
        if not sentences:
            continue
        if maker is None:  # seeded by the first line too, so different files draw differently
            maker = PairMaker(counts, window, neg, sample, [seed, zlib.crc32(raws[0])])
        stats["valid"] += len(sentences)
        stats["words"] += sum(map(len, sentences))
        text, carry = maker.lines(sentences, carry)
        stats["pairs"] += text.count("\n")
        stdout.write(text)
    stdout.flush()
    stats["words_unsent"] = carry
    if stats_path:
        from datasets import append_counts
        append_counts(stats_path, stats)
    return stats


# ------------------------------------------------------------------ command lines
# ------------------------------------------------------------------ analogy questions
def read_tokens(path: str | Path) -> list:
    """The token column of a dictionary file, in id order."""
    with open(path, encoding="utf-8") as handle:
        return [line.split()[0] for line in handle if line.strip()]


def read_analogies(path: str | Path) -> list:
    """Questions `a b c d` (a is to b as c is to d) of a questions-words.txt-style file, lower-cased;
    `: section` headers and blank lines are skipped. ValueError names file:line of a bad line."""
    questions = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            words = line.lower().split()
            if not words or words[0].startswith(":"):
                continue
            if len(words) != 4:
                raise ValueError(f"{path}:{number}: expected an analogy `a b c d` or a `: section` header, "
                                 f"got {line.rstrip()!r}")
            questions.append(tuple(words))
    return questions


def analogy_ids(questions: Sequence[tuple], tokens: Sequence[str]) -> tuple:
    """(ids of the questions whose four words are all in the dictionary [n x 4], skipped count)."""
    import numpy as np
    index = {t: i for i, t in enumerate(tokens)}
    known = [[index[w] for w in q] for q in questions if all(w in index for w in q)]
    return np.array(known, dtype=np.int64).reshape(-1, 4), len(questions) - len(known)


def analogy_accuracy(vectors: np.ndarray, questions: np.ndarray, chunk: int = 256) -> float:
    """3CosAdd (word2vec's compute-accuracy): the answer to `a b c ?` is the word whose unit vector
    has the largest cosine with b - a + c (of unit vectors), a, b and c themselves excluded.
    `questions` is an [n x 4] id array; returns the fraction answered with d (nan when n = 0)."""
    import numpy as np
    if len(questions) == 0:
        return math.nan
    unit = np.asarray(vectors, dtype=np.float32)  # a chunk's scores: chunk x vocabulary floats
    unit = unit / np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-12)
    right = 0
    for start in range(0, len(questions), chunk):
        q = np.asarray(questions[start:start + chunk])
        scores = (unit[q[:, 1]] - unit[q[:, 0]] + unit[q[:, 2]]) @ unit.T
        rows = np.arange(len(q))[:, None]
        scores[rows, q[:, :3]] = -np.inf
        right += int((scores.argmax(axis=1) == q[:, 3]).sum())
    return right / len(questions)


def synthetic_analogies(path: str | Path, tokens: Sequence[str], questions: int, seed: int = 0,
                        unknown: float = 0.1) -> None:
    """A questions-words.txt-style file over the synthetic corpus' words: random distinct in-dictionary
    quadruples (the corpus plants no analogies, so expect near-chance accuracy: this exercises the
    metric, it does not measure quality), and a fraction `unknown` naming a word outside it."""
    import numpy as np
    rng = np.random.default_rng([seed, 0xA7])
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(": synthetic\n")
        for n in range(questions):
            words = [tokens[i] for i in rng.choice(len(tokens), size=4, replace=False)]
            if rng.random() < unknown:
                words[int(rng.integers(4))] = f"oov{n}"
            handle.write(" ".join(words).upper() + "\n")  # upper case: the reader is case-insensitive


def gen_parser() -> argparse.ArgumentParser:
    from fleetbench import cmdline  # the shared parser: one-line errors, typed flags

    p = cmdline.Parser(prog="fleetbench data gen word2vec",
                       description="preprocess text (or a synthetic Zipfian corpus) for Word2Vec")
    p.add_argument("--out", required=True, type=cmdline.OUTPUT_DIR, help="output directory (dict.txt, ids/)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--sentences", type=cmdline.COUNT, help="make a synthetic corpus of this many sentences")
    source.add_argument("--text", nargs="+", type=cmdline.INPUT_FILE,
                        help="text files, one sentence per line (e.g. 1B-words shards)")
    p.add_argument("--vocabulary", type=cmdline.COUNT, default=10000, help="synthetic vocabulary size")
    p.add_argument("--files", type=cmdline.COUNT, default=1, help="id files to write (>= workers)")
    p.add_argument("--min-count", type=cmdline.COUNT, default=5)
    p.add_argument("--seed", type=cmdline.SEED, default=0)
    p.add_argument("--analogies", type=cmdline.NON_NEGATIVE, default=0,
                   help="also write OUT/analogies.txt: this many questions over the dictionary's words")
    return p


def cli(argv: list[str] | None = None) -> int:
    """`fleetbench data gen word2vec --out DIR (--sentences N | --text FILE...) [...]`."""
    parser = gen_parser()
    args = parser.parse_args(argv)
    try:
        if args.text:
            summary = preprocess(args.text, args.out, args.min_count, args.files)
        else:
            summary = generate(args.out, args.sentences, args.vocabulary, args.files, args.min_count, args.seed)
        if args.analogies:
            synthetic_analogies(Path(args.out) / "analogies.txt", read_tokens(Path(args.out) / "dict.txt"),
                                args.analogies, args.seed)
            summary["analogies"] = args.analogies
    except (ValueError, OSError) as err:
        parser.error(str(err))
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m datasets.word2vec pipe --dict DICT [...]` (Fleet's pipe_command)."""
    parser = argparse.ArgumentParser(prog="python -m datasets.word2vec")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pipe", help="id lines on stdin -> MultiSlot pairs on stdout")
    p.add_argument("--dict", required=True)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--neg", type=int, default=5)
    p.add_argument("--sample", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stats", default=None)
    args = parser.parse_args(argv)
    pipe(sys.stdin.buffer, sys.stdout, read_counts(args.dict), window=args.window, neg=args.neg,
         sample=args.sample, seed=args.seed, stats_path=args.stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
