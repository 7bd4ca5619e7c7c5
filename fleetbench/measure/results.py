"""Result records (schema 1, measure/schema.py): building, an append-only JSONL store, loading,
aggregation of repeats into one group per experiment, and scaling efficiency.

One record per run, one JSON object per line. Appends are one write of one line, flushed and
fsynced, under an exclusive lock, so a crash can at worst leave a torn *last* line; `load` reports
and skips that line and keeps every line before it.
"""
from __future__ import annotations

import dataclasses
import datetime
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import uuid

from fleetbench.measure import contract, experiment, stability
from fleetbench.measure.contract import RunIdentity
from fleetbench.measure.experiment import Experiment
from fleetbench.measure.schema import (  # noqa: F401
    CONTROL,
    MODES,
    SCHEMA,
    SINGLE,
    SOURCE_KINDS,
    UNITS,
    RecordError,
    validate,
)
from fleetbench.measure.timing import summarize

RESULT_PREFIX = "FLEETBENCH_RESULT "


# ---------------------------------------------------------------------------------------------
# building records

def git_sha() -> str | None:
    """Commit of the checkout this code runs from; None outside a git work tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=2)
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


def make_record(identity: RunIdentity, metrics: dict | None, error: str | None = None) -> dict:
    """A complete schema-1 record: what the run was (network and launch from the launcher's
    contract where the identity leaves them out), what it measured, and id, time, env, topology, git."""
    try:
        identity = identity.resolved()
    except contract.ContractError as err:  # a launcher's malformed variable: the record cannot say where it ran
        raise RecordError(str(err)) from None
    env_info, topology_info = _collect_env()
    return {
        "schema": SCHEMA,
        "id": uuid.uuid4().hex,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
        **dataclasses.asdict(identity),
        "metrics": metrics,
        "env": env_info,
        "topology": topology_info,
        "git": git_sha(),
        "error": error,
    }


def _collect_env() -> tuple[dict, dict | None]:
    from fleetbench.machine import (  # lazy: collecting the environment runs tools
        env,
        topology,
    )
    return env.collect(), topology.detect_for_record()


# ---------------------------------------------------------------------------------------------
# store

def dumps(record: dict) -> str:
    """The one serialisation of a record: one line, keys sorted (diffable, stable)."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


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


class PathError(ValueError):
    """A results path that cannot take a record; the message is one line naming the flag and path."""


def check_appendable(path: str, flag: str = "--results") -> None:
    """PathError unless a record could be appended to `path`, found before anything runs. Tried
    for real (opening the file for append, or creating and removing a file where it would go): for
    root, access() says yes to anything, even under /proc. Creates nothing that stays."""
    if os.path.isdir(path):
        raise PathError(f"{flag} {path}: is a directory, expected a results file (.jsonl)")
    if os.path.exists(path):
        try:
            open(path, "ab").close()  # appending nothing changes nothing
        except OSError as e:
            raise PathError(f"{flag} {path}: cannot append to it ({e.strerror or e})") from None
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:  # append makes the rest
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise PathError(f"{flag} {path}: {parent} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".fleetbench-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise PathError(f"{flag} {path}: cannot create files in {parent} ({e.strerror or e})") from None


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


def load(paths) -> list[dict]:
    """Records of every file in `paths`, in order. A torn last line (no newline, not JSON) is
    reported on stderr and skipped; any other bad line raises RecordError naming file:line."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    records = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise RecordError(f"{path}: cannot read results file ({exc.strerror})")
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                torn = number == len(lines)  # the last piece has no newline after it
                if torn:
                    print(f"fleetbench: warning: {where}: skipped a torn last line ({len(raw)} "
                          f"bytes, no newline: an interrupted write)", file=sys.stderr)
                    continue
                raise RecordError(f"{where}: not a JSON record ({getattr(exc, 'msg', exc)})")
            validate(record, where)
            records.append(record)
    return records


def config_hash(record_or_config: dict) -> str:
    """Stable hash of a run's identity as a sweep sees it (to skip runs already done): benchmark,
    preset, resolved config, mode/method, nodes/devices and network. A bare config dict is hashed
    as the config. Aggregation groups runs by `experiment.of`, which also compares the build,
    device and host the runs had."""
    if "config" in record_or_config:
        keys = ("benchmark", "preset", "config", "mode", "method", "nodes", "devices_per_node",
                "world_size", "network")
        subject = {key: record_or_config.get(key) for key in keys}
    else:
        subject = {"config": record_or_config}
    text = json.dumps(subject, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# aggregation: one group of repeats per experiment

# The name of a record's network setting, as groups and reports show it (analysis reads it here).
network_profile = experiment.network_name


def aggregate(records: list[dict], cv_threshold: float = stability.CV_THRESHOLD) -> list[dict]:
    """One group per experiment (`experiment.of`): throughput n/mean/std/median/min/max over the
    group's successful runs that are not outliers, groups in a fixed order.

    A group is a dict: the Experiment's fields (source, benchmark, preset, mode, method, network,
    nodes, devices_per_node, world_size, paddle, device, host, config without the noise keys),
    then unit, the statistics, failed, errors, noise_differs and published_aggregate. Failed runs
    (error set) are counted in `failed` and excluded from the statistics. A published record
    (source set) already is a summary: its mean and std (metrics.throughput_std, null when not
    published) pass through as published, its n is metrics.repeats (null when the source does not
    say). `noise_differs` names the noise keys (e.g. seed) whose values differ between the pooled
    runs. Measured groups: n/mean/std/median/min/max over the runs not flagged as outliers, plus
    `stability_fields` (runs, cv, unstable, outliers, excluded, mean_all, ci95_pct, until_stable).
    """
    groups: dict[Experiment, list[dict]] = {}
    for record in records:
        groups.setdefault(experiment.of(record), []).append(record)
    return [_group(exp, groups[exp], cv_threshold) for exp in sorted(groups, key=Experiment.sort_key)]


def stability_fields(ok: list[dict], cv_threshold: float) -> dict:
    """A measured group's figure and how far its runs agree (fleetbench.measure.stability).

    The figure (n, mean, std, median, min, max; so ci95_pct, speedup and efficiency too) is over
    the runs not flagged by the MAD rule (stability.kept): a disturbed run is shown and excluded,
    never silently: `excluded` holds the ids left out (stability.excluded: at most a quarter of the
    runs, so some `outliers` may be flagged and kept) and `mean_all` the mean
    over every run, and everything that prints the figure says so. How far the runs agree is
    judged on all of them: runs (id and throughput, in store order), cv, unstable (cv >
    cv_threshold), outliers (ids flagged), and until_stable: how a sweep's adaptive repeats ended
    (stability.verdict; null without them)."""
    values = [r["metrics"]["throughput"] for r in ok]
    figure, ids = stability.kept(values), [ok[i]["id"] for i in stability.outliers(values)]
    left_out = [ok[i]["id"] for i in stability.excluded(values)]
    return dict(summarize(figure),
                runs=[{"id": r["id"], "throughput": v} for r, v in zip(ok, values)],
                cv=stability.cv(values), unstable=stability.is_unstable(values, cv_threshold),
                cv_threshold=cv_threshold, outliers=ids, excluded=left_out,
                mean_all=summarize(values)["mean"], ci95_pct=stability.ci_pct(figure),
                until_stable=stability.verdict(_policy(ok), values))


def _policy(ok: list[dict]) -> dict | None:
    """The until-stable policy of the group's latest run (config.runtime.repeats), if any."""
    return ((ok[-1]["config"].get("runtime") or {}).get("repeats")) if ok else None


def _group(exp: Experiment, members: list[dict], cv_threshold: float) -> dict:
    ok = [r for r in members if r.get("error") is None]
    failed = [r for r in members if r.get("error") is not None]
    units = sorted({r["metrics"]["unit"] for r in ok})
    where = f"{exp.mode}/{exp.method}, world size {exp.world_size}, network {exp.network or 'none'}"
    if len(units) > 1:
        raise RecordError(f"{exp.benchmark}: runs of one experiment ({where}) report different "
                          f"units ({', '.join(units)}); expected one")
    group = dict(exp.fields(), unit=units[0] if units else None, failed=len(failed),
                 errors=sorted({r["error"] for r in failed}),
                 noise_differs=experiment.differing([r["config"] for r in members]))
    if exp.source and ok:
        if len(ok) != 1:
            raise RecordError(f"{exp.source}: {len(ok)} published records for one experiment "
                              f"({exp.benchmark}, {where}); expected one")
        metrics = ok[0]["metrics"]
        group.update({"n": metrics.get("repeats"), "mean": metrics["throughput"],
                      "std": metrics.get("throughput_std"), "median": None, "min": None,
                      "max": None, "published_aggregate": True})
        published_cv = group["std"] / group["mean"] if group["std"] is not None and group["mean"] else None
        group.update(runs=[], cv=published_cv, cv_threshold=cv_threshold, outliers=[], excluded=[],
                     mean_all=group["mean"], ci95_pct=None, until_stable=None,
                     unstable=published_cv is not None and published_cv > cv_threshold)
    else:
        group.update(stability_fields(ok, cv_threshold), published_aggregate=False)
    return group


def series_key(group: dict) -> tuple:
    """Groups of one scaling curve: everything but the size of the job."""
    return experiment.comparable(group) + (group["mode"], group["method"], group["network"])


def _usable(group: dict) -> bool:
    return group.get("mean") is not None


def is_control(group: dict) -> bool:
    """A method=none control (a record or a group): no efficiency, no baseline, no chart."""
    return group.get("mode") == "collective" and group.get("method") == CONTROL


def baseline_for(group: dict, groups: list[dict]) -> tuple[dict | None, str, str]:
    """(baseline group, axis, note) for the scaling efficiency of `group`.

    Looked for among `groups` (the same results), in this order:
      1. the 1-device group of the same curve (same method and network);
      2. the 1-device group of the same method with no network setting (one device sends nothing);
      3. the 1-device `single` run of the same benchmark (plain training, no distribution);
      4. the 1-node group of the same curve with the same devices per node (axis "nodes").
    The baseline must be comparable (`experiment.comparable`: same source, benchmark, preset,
    unit, Paddle build, device, host and config apart from method and runtime keys). No match:
    (None, axis, why).
    """
    same = [g for g in groups if _usable(g) and g["world_size"] == 1 and not is_control(g)
            and experiment.comparable(g) == experiment.comparable(group)]
    tiers = (
        ("same method and network", lambda g: g["mode"] == group["mode"]
         and g["method"] == group["method"] and g["network"] == group["network"]),
        ("same method, no network", lambda g: g["mode"] == group["mode"]
         and g["method"] == group["method"] and g["network"] is None),
        ("single-device run", lambda g: g["method"] == SINGLE),
    )
    for label, match in tiers:
        found = [g for g in same if match(g)]
        if len(found) == 1:
            return found[0], "devices", f"baseline: world size 1, {label}"
        if len(found) > 1:
            return None, "devices", f"no efficiency: {len(found)} candidate world-size-1 baselines ({label})"
    # The nodes axis exists only where the curve really spans several nodes of equal size.
    curve = [g for g in groups if _usable(g) and series_key(g) == series_key(group)
             and g["devices_per_node"] == group["devices_per_node"]]
    one_node = [g for g in curve if g["nodes"] == 1]
    if one_node and any(g["nodes"] > 1 for g in curve):
        return one_node[0], "nodes", "baseline: 1 node of the same curve"
    return None, "devices", ("no efficiency: no world-size-1 or 1-node baseline of this "
                             "benchmark in these results")


def add_efficiency(groups: list[dict]) -> list[dict]:
    """Copies of `groups` with scale, ideal, speedup and efficiency = thr(N) / (N x thr(1))
    against the measured baseline found by `baseline_for`, plus a `baseline_note` saying which,
    and speedup_err / efficiency_err carrying the uncertainty of both means (`_ratio_errors`)."""
    out = []
    for group in groups:
        group = dict(group)
        baseline, axis, note = baseline_for(group, groups) if _usable(group) else (None, "devices", "")
        if is_control(group):
            baseline, note = None, "control run (method=none): not a training result, no efficiency"
        scale = group["world_size"] if axis == "devices" else group["nodes"]
        group.update({"axis": axis, "scale": scale, "baseline_note": note, "baseline": None,
                      "ideal": None, "speedup": None, "efficiency": None, "speedup_err": None,
                      "efficiency_err": None})
        if baseline is not None and baseline["mean"] > 0:
            group["baseline"] = {k: baseline[k] for k in ("method", "network", "nodes",
                                                          "devices_per_node", "world_size",
                                                          "mean", "std", "n", "excluded")}
            group["ideal"] = scale * baseline["mean"]
            group["speedup"] = group["mean"] / baseline["mean"]
            group["efficiency"] = group["speedup"] / scale
            group.update(_ratio_errors(group, baseline))
        out.append(group)
    return out


def _ratio_errors(group: dict, baseline: dict) -> dict:
    """Standard errors of speedup and efficiency from the standard errors (std / sqrt(n)) of both
    means (stability.ratio_rel_error); None where a std is unknown."""
    rel = stability.ratio_rel_error(group["mean"], stability.sem(group["std"], group["n"]),
                                    baseline["mean"], stability.sem(baseline["std"], baseline["n"]))
    if rel is None:
        return {}
    return {"speedup_err": rel * group["speedup"], "efficiency_err": rel * group["efficiency"]}


def summarize_records(records: list[dict], cv_threshold: float = stability.CV_THRESHOLD) -> list[dict]:
    """aggregate + add_efficiency: the groups a sweep or a report prints."""
    return add_efficiency(aggregate(records, cv_threshold))
