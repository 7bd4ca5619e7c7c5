"""Result records (schema 1, store/schema.py): building, an append-only JSONL store, loading,
and storing the records ranks printed in their logs.
Every rank imports this module to store its record (it and the schema are all a rank imports of
store/: no database driver); grouping repeats and scaling efficiency, which only reports and
sweeps need, are in measure/repeats/aggregate.py.

One record per run, one JSON object per line. Appends are one write of one line, flushed and
fsynced, under an exclusive lock, so a crash can at worst leave a torn *last* line; `load` reports
and skips that line and keeps every line before it.
"""
from __future__ import annotations

import dataclasses
import datetime
import fcntl
import glob
import hashlib
import json
import os
import subprocess
import sys
import uuid

from fleetbench import cmdline
from fleetbench.measure import contract
from fleetbench.measure.contract import RunIdentity
from fleetbench.store.schema import (  # noqa: F401
    MODES,
    SCHEMA,
    SOURCE_KINDS,
    UNITS,
    Environment,
    Metrics,
    PaddleBuild,
    Record,
    RecordError,
    validate,
)

RESULT_PREFIX = "FLEETBENCH_RESULT "


# ---------------------------------------------------------------------------------------------
# building records

def git_sha(here: str = os.path.dirname(os.path.abspath(__file__))) -> str | None:
    """Commit of the checkout `here` (this code's) is in, with `-dirty` when a tracked file differs
    from it (as `git describe --dirty` marks it: the run's code is not that commit's); None outside
    a git work tree."""
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=2)
        # --no-optional-locks: ranks and tests read it at once; a status must not take index.lock
        changed = subprocess.run(["git", "--no-optional-locks", "-C", here, "status", "--porcelain",
                                  "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = out.stdout.strip()
    if out.returncode != 0 or not sha:
        return None
    return sha + ("-dirty" if changed.returncode == 0 and changed.stdout.strip() else "")


def short_commit(git: str | None, digits: int = 8) -> str:
    """A record's `git` for people: its first `digits` hex digits, `-dirty` kept ("" for none)."""
    if not git:
        return ""
    return git[:digits] + ("-dirty" if git.endswith("-dirty") else "")


def make_record(identity: RunIdentity, metrics: dict | None, error: str | None = None, *,
                env: dict, topology: dict | None) -> dict:
    """A complete schema-1 record: what the run was (network and launch from the launcher's
    contract where the identity leaves them out), what it measured, and id, time, git, and the
    `env` and `topology` blocks given (machine/stamp.record collects this machine's)."""
    try:
        identity = identity.resolved()
    except contract.ContractError as err:  # a launcher's malformed variable: the record cannot say where it ran
        raise RecordError(str(err)) from None
    return {
        "schema": SCHEMA,
        "id": uuid.uuid4().hex,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
        **dataclasses.asdict(identity),
        "metrics": metrics,
        "env": env,
        "topology": topology,
        "git": git_sha(),
        "error": error,
    }


# ---------------------------------------------------------------------------------------------
# store

def dumps(record) -> str:
    """The one serialisation of a record (a dict or a Record: its JSON object): one line, keys
    sorted (diffable, stable)."""
    return json.dumps(record.doc if isinstance(record, Record) else record, sort_keys=True, ensure_ascii=False)


def append(path: str, record: dict) -> None:
    """Validate, then add `record` to `path` as one line in one write, flushed and fsynced.

    A last line without its newline is completed first: a line that parses (a file edited by hand
    or concatenated) gets its newline and stays; a torn one left by an earlier crash is moved to
    `<path>.torn` (kept, not deleted). Either way the new line is not glued to it.
    """
    validate(record, f"{path}: new record")
    data = (dumps(record) + "\n").encode()
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # concurrent writers must not see each other's half lines
        _complete_last_line(fd, path)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _last_line_start(fd: int, size: int) -> int:
    """Offset just after the last newline of the file (0 when it has none)."""
    start = size
    while start > 0:  # scan back in chunks: a record can be long
        chunk_start = max(0, start - 65536)
        cut = os.pread(fd, start - chunk_start, chunk_start).rfind(b"\n")
        if cut >= 0:
            return chunk_start + cut + 1
        start = chunk_start
    return 0


def _complete_last_line(fd: int, path: str) -> None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = _last_line_start(fd, size)
    tail = os.pread(fd, size - start, start)
    if _parses(tail):  # the same test `load` applies: a line that parses is a record, not a tear
        os.write(fd, b"\n")
        return
    with open(path + ".torn", "ab") as side:
        side.write(tail + b"\n")
        side.flush()
        os.fsync(side.fileno())
    os.ftruncate(fd, start)
    print(f"fleetbench: warning: {path}: moved a torn last line ({len(tail)} bytes, from an "
          f"interrupted write) to {path}.torn", file=sys.stderr)


def _parses(raw: bytes) -> bool:
    try:
        json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return True


class PathError(cmdline.UserError):
    """A results path that cannot take a record; the message is one line naming the flag and path."""


def append_problem(path: str) -> str | None:
    """Why a record could not be appended to `path`, or None: found before anything runs. Tried
    for real (cmdline.output_file_problem); a store with a bad line (other than a torn last one,
    which `append` sets aside) is refused too, as `load` and so every report would refuse it after
    the append. Creates nothing that stays."""
    problem = cmdline.output_file_problem(path, "a results file (.jsonl)")
    if problem or not os.path.isfile(path):
        return problem
    try:
        _read(path, warn=False)
    except RecordError as e:
        return f"{str(e).removeprefix(path)}; nothing was appended"
    return None


def check_appendable(path: str, flag: str = "--results") -> None:
    """PathError (`FLAG PATH: why`) unless a record could be appended to `path` (append_problem)."""
    problem = append_problem(path)
    if problem:
        raise PathError(f"{flag} {path}{'' if problem.startswith(':') else ': '}{_expected(problem)}")


def _store(text: str) -> str:
    problem = append_problem(text)
    if problem:
        raise cmdline.Refused(f"{text or repr(text)}{'' if problem.startswith(':') else ': '}{_expected(problem)}")
    return text


def _expected(problem: str) -> str:
    return cmdline.with_expected(problem, "a results file (.jsonl) it can append to")


# the type of every --results flag that appends to a store (the default is checked too)
STORE = cmdline.Kind("a results file it can append to", _store,
                     ("", cmdline.DIRECTORY, cmdline.UNWRITABLE + ".jsonl", cmdline.CORRUPT))


class StoreError(OSError):
    """A result could not be appended to its store; the message names the store and says where
    the record is kept instead (the FLEETBENCH_RESULT line printed before the append)."""


def emit(path: str, record: dict) -> None:
    """Print the record (`FLEETBENCH_RESULT {json}`), then append it to `path`.

    The line is printed first so that a store that cannot be written never loses the result: it
    stays in the rank's log, and the StoreError raised says so.
    """
    print(RESULT_PREFIX + dumps(record), flush=True)
    stopped = contract.RankContract.from_env().stopped_file
    if stopped and os.path.exists(stopped):
        print(f"fleetbench: the supervisor had already judged this job failed and was stopping it; "
              f"record not stored in {path} (kept in this log)", file=sys.stderr, flush=True)
        return
    try:
        append(path, record)
    except OSError as exc:
        raise StoreError(f"{path}: cannot append the result ({exc.strerror or exc}); the record is "
                         f"kept in this rank's log as the {RESULT_PREFIX.strip()} line") from exc


def load(paths) -> list[Record]:
    """Records of every file in `paths`, in order. A torn last line (no newline, not JSON) is
    reported on stderr and skipped; any other bad line raises RecordError naming file:line."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    return [Record.of(record) for path in paths for record in _read(path)]


def _read(path: str, warn: bool = True) -> list[dict]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise RecordError(f"{path}: cannot read results file ({exc.strerror})")
    records, lines = [], data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if number == len(lines):  # the last piece has no newline after it: a torn write
                if warn:
                    print(f"fleetbench: warning: {where}: skipped a torn last line ({len(raw)} "
                          f"bytes, no newline: an interrupted write)", file=sys.stderr)
                continue
            raise RecordError(f"{where}: not a JSON record ({getattr(exc, 'msg', exc)}); "
                              "expected one JSON record a line")
        validate(record, where)
        records.append(record)
    return records


# ---------------------------------------------------------------------------------------------
# records printed in logs (`fleetbench results import LOG...`, the ssh and Slurm executors)
#
# Rank 0 of every benchmark prints its record as one line `FLEETBENCH_RESULT {json}` (emit). Where
# the rank's own results file is out of reach (a Kubernetes pod, a node's scratch disk) its log
# still carries the record: `kubectl logs POD > pod.log; fleetbench results import pod.log`. The
# ssh and Slurm executors use the same import on the logs they bring back from the nodes. Each
# record is validated (schema 1) and stored once: a record id already in the store is refused and
# named; the same record seen twice in the input (a launcher echoes rank 0's log) is stored once.
# Nothing is stored when any input line is malformed (RecordError naming file:line).

RANK_LOG_GLOBS = ("workerlog.*", "serverlog.*")


def records_in(path):
    """[(where, record)] of the FLEETBENCH_RESULT lines of one log, validated (RecordError)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise RecordError(f"{path}: cannot read log ({e.strerror})") from None
    found = []
    marker = RESULT_PREFIX.encode()
    for number, raw in enumerate(data.split(b"\n"), start=1):
        at = raw.find(marker)  # `kubectl logs --timestamps` and srun --label put text before it
        if at < 0:
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(raw[at + len(marker):].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RecordError(f"{where}: FLEETBENCH_RESULT line is not a JSON record "
                              f"({getattr(e, 'msg', e)}); expected `FLEETBENCH_RESULT {{json}}`") from None
        validate(record, where)
        found.append((where, record))
    return found


def rank_logs(log_dir):
    """Rank logs under a job's log directory (every node's), in a stable order."""
    paths = []
    for pattern in RANK_LOG_GLOBS:
        paths += glob.glob(os.path.join(log_dir, "**", pattern), recursive=True)
    return sorted(set(paths))


def job_record(log_dir: str, store: str) -> dict | None:
    """The record a job stored in `store`, found by the id its rank printed in the job's logs (the
    FLEETBENCH_RESULT lines under `log_dir`, every node's); None when the store holds none of them.
    By id, not by position: other jobs may append to the same store meanwhile."""
    ids = [record["id"] for log in rank_logs(log_dir) for _, record in records_in(log)]
    if not ids or not os.path.exists(store):
        return None
    # the lines that hold one of the ids as `dumps` writes it, parsed alone: a store of 100,000
    # records is read, not validated whole, at the end of every job
    markers = [dumps({"id": rid})[1:-1].encode() for rid in ids]
    found = []
    with open(store, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if any(marker in line for marker in markers) and _parses(line):  # not a torn last line
                record = json.loads(line)
                validate(record, f"{store}:{number}")
                found += [record] if record["id"] in ids else []
    return found[-1] if found else None


def stored_ids(store):
    return {r["id"] for r in load(store)} if os.path.exists(store) else set()


def import_logs(paths, store):
    """Store each new record of `paths` once. Returns (stored [ids], refused [(where, id)])."""
    unique = {}
    for where, record in (item for path in paths for item in records_in(path)):
        first = unique.setdefault(record["id"], (where, record))[1]
        if dumps(first) != dumps(record):
            raise RecordError(f"{where}: record id {record['id']} appears twice with different content")
    have = stored_ids(store)
    stored, refused = [], []
    for rid, (where, record) in unique.items():
        if rid in have:
            refused.append((where, rid))
            continue
        append(store, record)
        stored.append(rid)
    return stored, refused


def config_hash(record_or_config: dict) -> str:
    """Stable hash of a run's identity as a sweep sees it (to skip runs already done): benchmark,
    preset, resolved config, mode/method, nodes/devices and network. A bare config dict is hashed
    as the config. Aggregation groups runs by `experiment.of` (measure/repeats/aggregate.py), which also compares the build,
    device and host the runs had."""
    if "config" in record_or_config:
        keys = ("benchmark", "preset", "config", "mode", "method", "nodes", "devices_per_node",
                "world_size", "network")
        subject = {key: record_or_config.get(key) for key in keys}
    else:
        subject = {"config": record_or_config}
    text = json.dumps(subject, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
