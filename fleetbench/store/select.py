"""Which runs a reader reads from a database: `--db URL` and `--where KEY=VALUE` (repeatable, all
must hold), shared by `report`, `compare`, `history`, `explain` and `gate`. Pure but for `records`,
which reads the store.

    benchmark=resnet50  preset=tiny  mode=collective  method=mgwfbp  network=10gbe  source=...
    commit=03c1503      the fleetbench commit, a prefix
    paddle=2.6          the Paddle version, a prefix
    tag=main            the tag given at import (fleetbench results import --tag)
    since=YYYY-MM-DD    runs at or after this date (or ISO time)
    until=YYYY-MM-DD    runs before it
    id=RUN_ID
    nodes=2  devices_per_node=8  world_size=16
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Callable

from fleetbench import cmdline

EQUAL = ("benchmark", "preset", "mode", "method", "network", "source", "tag", "id")
SHAPE = ("nodes", "devices_per_node", "world_size")  # integers
PREFIX = {"commit": "git", "paddle": "paddle"}
TIME = {"since": ">=", "until": "<"}
KEYS = EQUAL + SHAPE + tuple(PREFIX) + tuple(TIME)


def _filter(text: str) -> tuple[str, str, str]:
    """`KEY=VALUE` as (column, op, value); ValueError (the Kind's message) otherwise."""
    key, sep, value = str(text).partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not value or key not in KEYS:
        raise ValueError(text)
    if key in TIME:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return "time", TIME[key], when.isoformat() if "T" in value or " " in value else value
    if key in PREFIX:
        return PREFIX[key], "prefix", value
    if key in SHAPE:
        number = int(value)
        if number < 1:
            raise ValueError(text)
        return key, "=", number
    return key, "=", value


FILTER = cmdline.Kind(f"KEY=VALUE with KEY one of {', '.join(KEYS)} (since/until: a date)", _filter,
                      ("", "benchmark", "colour=red", "since=yesterday", "tag=", "nodes=two", "nodes=0"))
DB = cmdline.Kind("a database URL (sqlite:///PATH, postgresql://USER@HOST/DB) or a SQLite file",
                  cmdline._nonempty, ("",))


def add_db(p, required: bool = False) -> None:
    """--db URL and --where KEY=VALUE on a reader's parser."""
    p.add_argument("--db", type=DB, required=required, metavar="URL",
                   help="read the runs from this database (fleetbench results import ... --db URL) instead of files")
    p.add_argument("--where", type=FILTER, action="append", default=[], metavar="KEY=VALUE",
                   help=f"with --db: only runs where KEY=VALUE ({', '.join(KEYS)}); repeat to narrow")


def describe(url: str, where) -> str:
    """`sqlite:///r.db [benchmark=resnet50, commit 03c1...]`: the side's name where files are named."""
    words = {"=": "=", "prefix": "~", ">=": ">=", "<": "<"}
    return url + (f" [{', '.join(f'{c}{words[o]}{v}' for c, o, v in where)}]" if where else "")


def records(url: str, where=()) -> list[dict]:
    """The store's records that pass `where` (database.load); StoreError names the URL."""
    from fleetbench.store import database
    return database.load(url, where)


@dataclasses.dataclass(frozen=True)
class Side:
    """Where a reader's records come from: files, a database with filters, or records in hand
    (the gate's baseline, already chosen)."""
    files: tuple = ()
    db: str | None = None
    where: tuple = ()
    given: tuple | None = None
    label: str = ""

    def records(self) -> list[dict]:
        from fleetbench.store import results
        if self.given is not None:
            return list(self.given)
        return records(self.db, self.where) if self.db else results.load(list(self.files))

    def names(self) -> list[str]:
        if self.label:
            return [self.label]
        return list(self.files) if not self.db else [describe(self.db, self.where)]


def side(source) -> Side:
    """A Side from a Side or a list of files."""
    return source if isinstance(source, Side) else Side(files=tuple(source))


def marked(paths: list[str], reader: Callable[[list[str]], list[dict]], url: str | None = None,
           where=()) -> list[dict]:
    """Records of every results file, or of --db URL (never both), each marked with its file's name
    less the names' common start (`_file`), so that cells of one name from different files can be
    told apart; ValueError (one line) when neither or both are given."""
    if bool(url) == bool(paths) or (where and not url):
        raise ValueError("expected results files or --db URL (with --where KEY=VALUE), one of them")
    if not url:
        return _marked([(path, reader([path])) for path in paths])
    from fleetbench.store import database

    files: dict[str, list[dict]] = {}
    for path, record in database.load(url, where, files=True):
        files.setdefault(path, []).append(record)
    return _marked(list(files.items()))


def _marked(files: list[tuple[str, list[dict]]]) -> list[dict]:
    names = [os.path.splitext(os.path.basename(p))[0] for p, _ in files]
    start = len(os.path.commonprefix(names)) if len(set(names)) > 1 else 0
    return [dict(r, _file=short[start:] or short) for (_, records), short in zip(files, names) for r in records]
