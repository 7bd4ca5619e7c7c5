"""`fleetbench results import LOG... [--results FILE]`: store the records that ranks printed.

Rank 0 of every benchmark prints its record as one line `FLEETBENCH_RESULT {json}`. Where the
rank's own results file is out of reach (a Kubernetes pod, a node's scratch disk) its log still
carries the record: `kubectl logs POD > pod.log; fleetbench results import pod.log`. The ssh and
Slurm executors use the same import on the logs they bring back from the nodes.

Each record is validated (schema 1) and stored once: a record id already in the store is refused
and named; the same record seen twice in the input (a launcher echoes rank 0's log) is stored
once. Nothing is stored when any input line is malformed (one line naming file:line, exit 2).
Exit status: 0 every record stored, 1 some refused as duplicates, 2 bad input.
"""
import glob
import json
import os
import sys

from fleetbench import cmdline
from fleetbench.measure import registry, results

RANK_LOG_GLOBS = ("workerlog.*", "serverlog.*")


def records_in(path):
    """[(where, record)] of the FLEETBENCH_RESULT lines of one log, validated (RecordError)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise results.RecordError(f"{path}: cannot read log ({e.strerror})") from None
    found = []
    marker = results.RESULT_PREFIX.encode()
    for number, raw in enumerate(data.split(b"\n"), start=1):
        at = raw.find(marker)  # `kubectl logs --timestamps` and srun --label put text before it
        if at < 0:
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(raw[at + len(marker):].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise results.RecordError(f"{where}: FLEETBENCH_RESULT line is not a JSON record "
                                      f"({getattr(e, 'msg', e)}); expected `FLEETBENCH_RESULT {{json}}`") from None
        results.validate(record, where)
        found.append((where, record))
    return found


def rank_logs(log_dir):
    """Rank logs under a job's log directory (every node's), in a stable order."""
    paths = []
    for pattern in RANK_LOG_GLOBS:
        paths += glob.glob(os.path.join(log_dir, "**", pattern), recursive=True)
    return sorted(set(paths))


def stored_ids(store):
    return {r["id"] for r in results.load(store)} if os.path.exists(store) else set()


def import_logs(paths, store):
    """Store each new record of `paths` once. Returns (stored [ids], refused [(where, id)])."""
    unique = {}
    for where, record in (item for path in paths for item in records_in(path)):
        first = unique.setdefault(record["id"], (where, record))[1]
        if results.dumps(first) != results.dumps(record):
            raise results.RecordError(f"{where}: record id {record['id']} appears twice with different content")
    have = stored_ids(store)
    stored, refused = [], []
    for rid, (where, record) in unique.items():
        if rid in have:
            refused.append((where, rid))
            continue
        results.append(store, record)
        stored.append(rid)
    return stored, refused


def parser() -> cmdline.Parser:
    p = cmdline.Parser(prog="fleetbench results", description="Work with stored results.")
    sub = p.add_subparsers(dest="action", required=True)
    imp = sub.add_parser("import", help="store the FLEETBENCH_RESULT records printed in logs (pod logs)")
    imp.add_argument("logs", nargs="+", metavar="LOG", type=cmdline.INPUT_FILE)
    imp.add_argument("--results", default=registry.DEFAULT_RESULTS, type=results.STORE,
                     help=f"the store (default {registry.DEFAULT_RESULTS})")
    return p


def cli(argv):
    args = parser().parse_args(argv)
    try:
        stored, refused = import_logs(args.logs, args.results)
    except results.RecordError as e:
        print(f"fleetbench results import: error: {e}", file=sys.stderr)
        return 2
    for where, rid in refused:
        print(f"fleetbench results import: refused {where}: record {rid} is already in {args.results}",
              file=sys.stderr)
    print(f"fleetbench results import: stored {len(stored)} record(s) in {args.results}"
          + (f", refused {len(refused)} duplicate(s)" if refused else ""))
    return 1 if refused else 0
