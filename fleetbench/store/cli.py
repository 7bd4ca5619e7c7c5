"""`fleetbench results import`: records into a JSONL store (as before) or into a database.

    fleetbench results import LOG... [--results FILE]          FLEETBENCH_RESULT lines of logs into a store
    fleetbench results import FILE... --db URL [--tag TAG]     JSONL files and logs indexed in a database

With --db the files stay the source and the database is their index (store/database.py): each
record is stored once by its id, so importing a file again adds nothing; a line that is not a
valid record is named (file:line, why) and skipped, and every other record is indexed (exit 1 when
a line was skipped, 0 otherwise). A file is read as a log when any of its lines carries
`FLEETBENCH_RESULT ` (its other lines are a log's), else as JSONL (every non-empty line a record).
`--tag` labels the runs of this import (a branch, a release) for `--where tag=...`.
"""
from __future__ import annotations

import argparse
import json
import sys

from fleetbench import cmdline
from fleetbench.measure import registry
from fleetbench.store import database, results, select



def _tag(text: str) -> str:
    if not text.strip() or any(c.isspace() for c in text) or len(text) > 200:
        raise ValueError(text)
    return text


PROG = "fleetbench results import"
TAG = cmdline.Kind("a tag without spaces (a branch or release name), at most 200 characters", _tag, ("", "two words"))


def chunks(path: str) -> tuple[list[tuple], list[str]]:
    """([(path, first line number, lines, is a log)] of database.BATCH lines each, [problems]) of one
    file: the pieces `prepare` reads, in worker processes when there are several."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return [], [f"{path}: cannot read ({exc.strerror})"]
    log = results.RESULT_PREFIX.encode() in data
    lines = data.split(b"\n")
    if lines and not lines[-1]:  # the newline that ends the last line starts no line
        lines.pop()
    return [(path, first + 1, lines[first:first + database.BATCH], log)
            for first in range(0, len(lines), database.BATCH)], []


def parse(path: str, first: int, lines: list[bytes], log: bool) -> tuple[list[tuple[str, dict]], list[str]]:
    """([(where, record)], [problems]) of lines of a file numbered from `first`: every line that is
    a valid record, and a `file:line: why` for every line that is not (a torn last line included)."""
    marker = results.RESULT_PREFIX.encode()
    found, problems = [], []
    for number, raw in enumerate(lines, start=first):
        at = raw.find(marker)
        if (log and at < 0) or not raw.strip():  # a log's other lines; blank lines
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(raw[at + len(marker):] if log else raw)
            if not isinstance(record, dict):
                raise results.RecordError("not a JSON object; expected one record a line")
            results.validate(record, where)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(f"{where}: not a JSON record ({getattr(exc, 'msg', exc)})")
            continue
        except results.RecordError as exc:
            problems.append(str(exc) if str(exc).startswith(where) else f"{where}: {exc}")
            continue
        found.append((where, record))
    return found, problems


def prepare(piece: tuple, tag: str | None) -> tuple[dict, list[str]]:
    """The database rows of one piece (`chunks`) and its problems: the CPU's share of an import
    (JSON read, validated, the environment and cluster made canonical and hashed)."""
    found, problems = parse(*piece)
    return database.batch_rows(found, tag), problems


def index(paths: list[str], url: str, tag: str | None = None, jobs: int | None = None) -> dict:
    """Index every file into the database at `url`: {"new": ids, "seen": n, "problems": [...]}.
    With several pieces, `jobs` worker processes (default: the CPUs, at most 4) prepare them while
    this one writes, in order."""
    import concurrent.futures
    import functools
    import os

    import sqlalchemy
    pieces, problems = [], []
    for path in paths:
        more, bad = chunks(path)
        pieces += more
        problems += bad
    jobs = min(4, os.cpu_count() or 1) if jobs is None else jobs
    eng = database.open_store(url)
    new, seen = [], 0
    pool = concurrent.futures.ProcessPoolExecutor(jobs) if jobs > 1 and len(pieces) > 1 else None
    try:
        for made, bad in (pool.map if pool else map)(functools.partial(prepare, tag=tag), pieces):
            problems += bad
            new += database.write(eng, made)
            seen += len(made["runs"])
    except sqlalchemy.exc.SQLAlchemyError as exc:  # the server went away, a disk filled: one line
        raise database.StoreError(f"--db {url}: {str(getattr(exc, 'orig', exc)).splitlines()[0]}") from None
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
        eng.dispose()
    return {"new": new, "seen": seen, "problems": problems}


def import_into_store(logs: list[str], store: str) -> int:
    """The records printed in logs into a JSONL store (store/results.import_logs). Exit status:
    0 every record stored, 1 some refused as duplicates; RecordError (a UserError) on bad input."""
    stored, refused = results.import_logs(logs, store)
    for where, rid in refused:
        print(f"fleetbench results import: refused {where}: record {rid} is already in {store}",
              file=sys.stderr)
    print(f"fleetbench results import: stored {len(stored)} record(s) in {store}"
          + (f", refused {len(refused)} duplicate(s)" if refused else ""))
    return 1 if refused else 0


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench results", description="Work with stored results.")
    sub = p.add_subparsers(dest="action", required=True)
    imp = sub.add_parser("import", help="store the records of logs (pod logs) or index result files in a database")
    imp.add_argument("logs", nargs="+", metavar="FILE", type=cmdline.INPUT_FILE,
                     help="logs with FLEETBENCH_RESULT lines; with --db, JSONL result files too")
    where = imp.add_mutually_exclusive_group()
    where.add_argument("--results", default=None, type=results.STORE,
                       help=f"the JSONL store (default {registry.DEFAULT_RESULTS})")
    where.add_argument("--db", type=select.DB, metavar="URL",
                       help="index into this database: sqlite:///PATH or postgresql://USER@HOST/DB (docs/guide/history.md)")
    imp.add_argument("--tag", type=TAG, help="with --db: label these runs (e.g. a branch) for --where tag=TAG")
    return p


@cmdline.refusing(PROG)
def cli(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.tag and not args.db:
        raise cmdline.UserError("--tag TAG: expected with --db URL (a JSONL store has no tags)")
    if not args.db:
        # the default store is checked as a given --results is (argparse types no None default)
        try:
            store_path = args.results or results.STORE(registry.DEFAULT_RESULTS)
        except argparse.ArgumentTypeError as exc:
            p.error(f"argument --results: {exc}")
        return import_into_store(args.logs, store_path)
    done = index(args.logs, args.db, args.tag)
    for problem in done["problems"]:
        print(f"fleetbench results import: skipped {problem}", file=sys.stderr)
    print(f"fleetbench results import: {done['seen']} record(s) read, {len(done['new'])} new in {args.db}, "
          f"{done['seen'] - len(done['new'])} already there"
          + (f"; {len(done['problems'])} line(s) skipped (named above)" if done["problems"] else ""))
    return 1 if done["problems"] else 0
