"""Criteo display-advertising data (the CTR-DNN benchmark's input): reader, validator, hashing,
synthetic generator, and the data-generator process that Fleet's datasets pipe files through.

Format (Criteo Kaggle/Terabyte `train.txt`), one example per line, terminated by `\\n` or `\\r\\n`
(the last line may lack it): exactly 40 tab-separated fields

    label   `0` or `1`
    I1-I13  13 integer features, each empty (missing) or a base-10 integer, possibly negative
    C1-C26  26 categorical features, each empty (missing) or 8 hexadecimal digits

Anything else is an invalid line. Training skips invalid lines and reports how many; with
`data.strict` it stops at the first one, naming file and line.

Features given to the model:
    dense   log(1 + max(x, 0)) per integer feature, 0 when missing (as DLRM does)
    C1-C26  one id per slot: CRC-32 of "C<slot>:<lower-case hex>" (empty when missing) folded into
            [1, buckets); a deterministic hash, identical in every process and on every machine
            (Python's hash() of str is salted per process by PYTHONHASHSEED and must never be used)
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import sys
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from datasets import append_counts

if TYPE_CHECKING:  # numpy is imported where it is used: the pipe processes start without it
    import numpy as np

NUM_DENSE = 13
NUM_SPARSE = 26
NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE
# The order of the slots a CTR program declares and the pipe writes (Fleet's MultiSlot format).
SLOTS = ["dense"] + [f"C{i}" for i in range(1, NUM_SPARSE + 1)] + ["label"]

_VALID = re.compile(rb"[01](?:\t(?:-?[0-9]+)?){13}(?:\t(?:[0-9a-fA-F]{8})?){26}")
_INT = re.compile(rb"-?[0-9]+")
_HEX = re.compile(rb"[0-9a-fA-F]{8}")


# ------------------------------------------------------------------ reading and validation
def strip_terminator(raw: bytes) -> bytes:
    if raw.endswith(b"\r\n"):
        return raw[:-2]
    if raw.endswith(b"\n"):
        return raw[:-1]
    return raw


def _show(value: bytes) -> str:
    text = value.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= 20 else text[:20] + "...")


def check_line(raw: bytes) -> str | None:
    """None when `raw` (one line, terminator included or not) is a valid Criteo line, else the
    reason in a few words."""
    line = strip_terminator(raw)
    if _VALID.fullmatch(line):
        return None
    fields = line.split(b"\t")
    if len(fields) != NUM_FIELDS:
        return f"expected {NUM_FIELDS} tab-separated fields, got {len(fields)}"
    if fields[0] not in (b"0", b"1"):
        return f"label (field 1) must be 0 or 1, got {_show(fields[0])}"
    for i in range(NUM_DENSE):
        value = fields[1 + i]
        if value and not _INT.fullmatch(value):
            return f"I{i + 1} (field {i + 2}) must be empty or a base-10 integer, got {_show(value)}"
    for i in range(NUM_SPARSE):
        value = fields[1 + NUM_DENSE + i]
        if value and not _HEX.fullmatch(value):
            return (f"C{i + 1} (field {i + 2 + NUM_DENSE}) must be empty or 8 hexadecimal digits, "
                    f"got {_show(value)}")
    return "malformed line"  # unreachable unless the rules above and _VALID disagree


def iter_lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, raw bytes) of a file, split on `\\n` only (a lone `\\r` is data)."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            yield number, raw


def validate(paths: Iterable[str | Path], max_errors: int = 10, strict: bool = False) -> dict:
    """Counts over every line of `paths`: {"files", "lines", "valid", "invalid", "errors"} with the
    first `max_errors` errors as {"file", "line", "reason"}. With `strict`, stop at the first."""
    report = {"files": 0, "lines": 0, "valid": 0, "invalid": 0, "errors": []}
    for path in paths:
        report["files"] += 1
        for number, raw in iter_lines(path):
            report["lines"] += 1
            reason = check_line(raw)
            if reason is None:
                report["valid"] += 1
                continue
            report["invalid"] += 1
            if len(report["errors"]) < max_errors:
                report["errors"].append({"file": str(path), "line": number, "reason": reason})
            if strict:
                return report
    return report


def first_error(paths: Iterable[str | Path]) -> str | None:
    """"file:line: reason" of the first invalid line in `paths`, or None."""
    report = validate(paths, max_errors=1, strict=True)
    if report["errors"]:
        error = report["errors"][0]
        return f"{error['file']}:{error['line']}: {error['reason']}"
    return None


# ------------------------------------------------------------------ features
# CRC-32 of "C<slot>:" per slot: crc32(value, start) continues it, so hashing a value needs no
# string building (the pipe hashes 26 values per line).
_SLOT_CRC = [zlib.crc32(b"C%d:" % slot) for slot in range(1, NUM_SPARSE + 1)]


def hash_category(slot: int, value: bytes, buckets: int) -> int:
    """Id in [1, buckets) of categorical value `value` (hex bytes, may be empty) of slot `slot`
    (1..26): CRC-32 of b"C<slot>:<value in lower case>". Id 0 is left free as the conventional
    padding id."""
    return 1 + zlib.crc32(value.lower(), _SLOT_CRC[slot - 1]) % (buckets - 1)


def dense_value(field: bytes) -> float:
    return math.log1p(max(int(field), 0)) if field else 0.0


def features(line: bytes, buckets: int) -> tuple[int, list[float], list[int]]:
    """(label, 13 dense floats, 26 sparse ids) of a valid line without its terminator."""
    fields = line.split(b"\t")
    dense = [dense_value(f) for f in fields[1:1 + NUM_DENSE]]
    ids = [hash_category(i + 1, f, buckets) for i, f in enumerate(fields[1 + NUM_DENSE:])]
    return int(fields[0]), dense, ids


class Encoder:
    """Raw line (terminator stripped) -> one example in Fleet's MultiSlot text format, slots in
    SLOTS order, each written as `<count> <values...>`; None for an invalid line. The same
    features as `features` and the same rules as `check_line`, made fast for the pipe: the text
    of every field value already seen is remembered (values repeat a lot: integer counts are
    small, categories Zipf-skewed), so a line is mostly two C-level dict lookups per field, and
    only a value not seen before is checked with the format's regexes and hashed. Each memo is
    emptied when it holds `limit` values."""

    def __init__(self, buckets: int, limit: int = 200000) -> None:
        self.buckets, self.limit = buckets, limit
        self.dense_memo = {}
        self.sparse_memos = [{} for _ in range(NUM_SPARSE)]

    def _dense(self, field: bytes) -> str | None:
        if field and not _INT.fullmatch(field):
            return None
        if len(self.dense_memo) >= self.limit:
            self.dense_memo.clear()
        text = self.dense_memo[field] = "%.6g" % dense_value(field)
        return text

    def _sparse(self, slot: int, field: bytes) -> str | None:
        if field and not _HEX.fullmatch(field):
            return None
        memo = self.sparse_memos[slot - 1]
        if len(memo) >= self.limit:
            memo.clear()
        text = memo[field] = str(hash_category(slot, field, self.buckets))
        return text

    def __call__(self, line: bytes) -> str | None:
        fields = line.split(b"\t")
        if len(fields) != NUM_FIELDS or fields[0] not in (b"0", b"1"):
            return None
        dense = list(map(self.dense_memo.get, fields[1:1 + NUM_DENSE]))
        while None in dense:  # values not seen before (few per line): check, convert, remember
            i = dense.index(None)
            dense[i] = self._dense(fields[1 + i])
            if dense[i] is None:
                return None
        sparse = list(map(dict.get, self.sparse_memos, fields[1 + NUM_DENSE:]))
        while None in sparse:
            i = sparse.index(None)
            sparse[i] = self._sparse(i + 1, fields[1 + NUM_DENSE + i])
            if sparse[i] is None:
                return None
        return "13 %s 1 %s 1 %s\n" % (" ".join(dense), " 1 ".join(sparse), "1" if fields[0] == b"1" else "0")


# ------------------------------------------------------------------ pipe (data generator)
def pipe(stdin: Iterable[bytes], stdout: IO[str], buckets: int, stats_path: str | None = None) -> dict:
    """Fleet's pipe_command: Criteo lines in, MultiSlot lines out; invalid lines are skipped and
    counted. The counts go to `stats_path` (one JSON line appended) so the trainer can report
    exactly how many examples it consumed and how many lines it skipped."""
    encode, write = Encoder(buckets), stdout.write
    valid = invalid = 0
    for raw in stdin:
        text = encode(raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw)
        if text is None:
            invalid += 1
        else:
            valid += 1
            write(text)
    stdout.flush()
    counts = {"valid": valid, "invalid": invalid}
    if stats_path:
        append_counts(stats_path, counts)
    return counts


# ------------------------------------------------------------------ synthetic generator
# Cardinalities shaped like a Criteo day's (a few tiny slots, several huge ones), scaled down.
CARDINALITY = [1460, 583, 100000, 50000, 305, 24, 12517, 633, 3, 93145, 5683, 80000, 3194,
               27, 14992, 60000, 10, 5652, 2173, 4, 70000, 18, 15, 28000, 105, 14200]
# Missing-value rates per field, roughly Criteo's (I12 and C19-C26 are often empty).
DENSE_MISSING = [0.45, 0.0, 0.2, 0.2, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.2]
SPARSE_MISSING = [0.0] * 18 + [0.44, 0.44, 0.0, 0.76, 0.0, 0.04, 0.44, 0.44]
ZIPF_A = 1.2
# The planted relation: a logistic model over (slot, value) weights and dense terms.
# Frequent values carry most of the signal (as in real logs, where rare ids are mostly noise), so a
# short run can learn it: weights of the `HEAD` most frequent values of a slot have WEIGHT_STD,
# the others TAIL_STD.
INFORMATIVE_SLOTS = (1, 2, 4, 5, 8, 10, 13, 14, 16, 17, 19, 20, 22, 25)  # 0-based slot indexes
HEAD, WEIGHT_STD, TAIL_STD = 50, 0.8, 0.2
DENSE_COEF = [0.8, -0.5, 0.0, 0.5, -0.4, 0.0, 0.6, 0.0, 0.0, 0.4, 0.0, 0.0, -0.5]
BIAS = -1.0
GENERATOR_VERSION = 3  # part of the synthetic cache key: bump when the output changes


def _relation(seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Weights of the planted relation; depend on the seed only, so every file agrees."""
    import numpy as np
    rng = np.random.default_rng([seed, 0xC7])
    weights = []
    for slot, size in enumerate(CARDINALITY):
        if slot in INFORMATIVE_SLOTS:
            stds = np.where(np.arange(size) < HEAD, WEIGHT_STD, TAIL_STD)
            weights.append(rng.normal(0.0, 1.0, size) * stds)
        else:
            weights.append(np.zeros(size))
    salts = rng.integers(0, 2**32, NUM_SPARSE)
    return weights, salts


@functools.lru_cache(maxsize=None)
def _zipf_cdf(size: int) -> np.ndarray:
    import numpy as np
    weights = np.arange(1, size + 1, dtype=float) ** -ZIPF_A
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    return cdf


def generate_rows(rows: int, seed: int, part: int, relation: tuple | None = None) -> list[str]:
    """`rows` synthetic Criteo lines (str, with `\\n`) for file number `part`: Zipf-skewed
    categories, missing values, labels drawn from the planted logistic relation."""
    import numpy as np
    weights, salts = relation or _relation(seed)
    rng = np.random.default_rng([seed, part, 0xDA7A])
    logit = np.full(rows, BIAS)
    columns = []
    for j in range(NUM_DENSE):
        values = np.floor(rng.lognormal(1.0 + 0.2 * j, 1.2, rows)).astype(np.int64)
        if j == 1:  # I2 holds small negative values in Criteo
            values -= rng.integers(0, 4, rows) * (rng.random(rows) < 0.1)
        missing = rng.random(rows) < DENSE_MISSING[j]
        x = np.log1p(np.maximum(values, 0)) * ~missing
        logit += DENSE_COEF[j] * (x - 1.5 * ~missing)
        columns.append(np.where(missing, "", values.astype(str)).tolist())
    for slot, size in enumerate(CARDINALITY):
        ranks = np.searchsorted(_zipf_cdf(size), rng.random(rows))  # Zipf truncated to the slot's values
        missing = rng.random(rows) < SPARSE_MISSING[slot]
        logit += np.where(missing, 0.0, weights[slot][ranks])
        # (rank * odd constant + salt) mod 2^32 is a bijection: distinct ranks, distinct values.
        codes = (ranks.astype(np.uint64) * np.uint64(2654435761) + np.uint64(salts[slot])) % np.uint64(2**32)
        hexes = np.char.mod("%08x", codes)
        columns.append(np.where(missing, "", hexes).tolist())
    labels = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))).astype(int).astype(str).tolist()
    return ["\t".join(fields) + "\n" for fields in zip(labels, *columns)]


def generate(out: str | Path, rows: int, files: int, seed: int = 0) -> list:
    """Write `rows` lines split evenly over `files` files `part-00000`... in `out`."""
    if rows < 1 or files < 1 or files > rows:
        raise ValueError(f"need rows >= files >= 1 (got rows={rows}, files={files})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    relation = _relation(seed)
    paths = []
    for part in range(files):
        count = rows * (part + 1) // files - rows * part // files
        path = out / f"part-{part:05d}"
        with open(path, "w", newline="") as handle:
            for start in range(0, count, 100000):  # bounded memory for big files
                handle.writelines(generate_rows(min(100000, count - start), seed, part * 1000 + start // 100000,
                                                relation))
        paths.append(path)
    return paths


def list_files(path: str | Path) -> list:
    """The data files of `path` (a file, or a directory's regular files, sorted by name)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if files:
            return files
        raise ValueError(f"{path}: directory holds no data files")
    raise ValueError(f"{path}: no such file or directory")


# ------------------------------------------------------------------ command lines
def gen_parser() -> argparse.ArgumentParser:
    from fleetbench import cmdline  # the shared parser: one-line errors, typed flags

    p = cmdline.Parser(prog="fleetbench data gen criteo", description="write synthetic files in the exact Criteo format")
    p.add_argument("--out", required=True, type=cmdline.OUTPUT_DIR, help="output directory")
    p.add_argument("--rows", type=cmdline.COUNT, required=True, help="lines in total")
    p.add_argument("--files", type=cmdline.COUNT, default=1, help="number of files (default 1)")
    p.add_argument("--seed", type=cmdline.SEED, default=0)
    return p


def validate_parser() -> argparse.ArgumentParser:
    from fleetbench import cmdline

    p = cmdline.Parser(prog="fleetbench data validate criteo", description="check files against the Criteo format")
    p.add_argument("paths", nargs="+", type=cmdline.EXISTING, help="files or directories")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    return p


def cli(argv: list[str] | None = None) -> int:
    """`fleetbench data gen criteo --out DIR --rows N --files K [--seed S]`."""
    parser = gen_parser()
    args = parser.parse_args(argv)
    try:
        paths = generate(args.out, args.rows, args.files, args.seed)
    except (ValueError, OSError) as err:
        parser.error(str(err))
    print(f"wrote {args.rows} lines in {len(paths)} files to {args.out}")
    return 0


def validate_cli(argv: list[str] | None = None) -> int:
    """`fleetbench data validate criteo PATH... [--json]`: exit 0 when every line is valid."""
    args = validate_parser().parse_args(argv)
    try:
        files = [f for p in args.paths for f in list_files(p)]
    except ValueError as err:
        print(f"fleetbench data validate criteo: error: {err}", file=sys.stderr)
        return 2
    report = validate(files)
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['files']} files, {report['lines']} lines: {report['valid']} valid, "
              f"{report['invalid']} invalid")
        for error in report["errors"]:
            print(f"{error['file']}:{error['line']}: {error['reason']}")
    return 0 if report["invalid"] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m datasets.criteo pipe --buckets N [--stats FILE]` (Fleet's pipe_command)."""
    parser = argparse.ArgumentParser(prog="python -m datasets.criteo")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pipe", help="Criteo lines on stdin -> MultiSlot lines on stdout")
    p.add_argument("--buckets", type=int, required=True)
    p.add_argument("--stats", default=None, help="append the valid/invalid counts to this file")
    args = parser.parse_args(argv)
    pipe(sys.stdin.buffer, sys.stdout, args.buckets, args.stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
