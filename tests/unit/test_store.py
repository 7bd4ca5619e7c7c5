"""The results database (issue 48): every committed record, measured or published, imported into
SQLite and into a real PostgreSQL (a throwaway server, tests/pgserver.py) reads back exactly;
importing twice adds nothing; a corrupt line is named with file:line and nothing else is lost; four
importers at once lose and double nothing; and report, compare, history and explain print the same
from the database as from the files."""
import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pgserver
import pytest

from fleetbench.history import synthetic
from fleetbench.report import explain, generate
from fleetbench.report.regression import comparison, history_view
from fleetbench.store import cli as importer
from fleetbench.store import database, results

REPO = Path(__file__).resolve().parents[2]
MEASURED = sorted(glob.glob(str(REPO / "results" / "*.jsonl")))
PUBLISHED = sorted(glob.glob(str(REPO / "results" / "reference" / "*.jsonl")))
COMMITTED = MEASURED + PUBLISHED  # every record the repository holds, measured here or published
DEMO_OLD = str(REPO / "results" / "kvm-2vcpu-paddle2.6.2-demo-2026-11-22.jsonl")
DEMO = str(REPO / "results" / "kvm-2vcpu-paddle2.6.2-demo.jsonl")
EXPLAIN = str(REPO / "results" / "kvm-2vcpu-paddle2.6.2-explain.jsonl")


@pytest.fixture(scope="module")
def postgres():
    why = pgserver.missing()
    if why:
        pytest.skip(why)
    with pgserver.server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    """A fresh empty database of each kind: a SQLite file, a new database on the session's server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    server = request.getfixturevalue("postgres")
    return pgserver.fresh_database(server, "t" + os.urandom(6).hex())


def test_every_committed_record_reads_back_exactly_and_twice_adds_nothing(db, capsys):
    # published records too: their `source` is an object, its column the source's name
    assert len(MEASURED) >= 19 and len(PUBLISHED) >= 33
    assert importer.cli(["import", *COMMITTED, "--db", db]) == 0
    seen = len(results.load(COMMITTED))
    assert capsys.readouterr().out.split(": ", 1)[1].startswith(f"{seen} record(s) read, {seen} new in ")
    again = importer.index(COMMITTED[::-1], db)  # another order: still nothing new
    assert again["problems"] == [] and again["new"] == [] and again["seen"] == seen
    assert database.load(db) == results.load(COMMITTED)
    name = json.loads(open(PUBLISHED[0]).readline())["source"]["name"]
    assert database.load(db, [("source", "=", name)]) == \
        [r for r in results.load(COMMITTED) if (r.get("source") or {}).get("name") == name]
    counts = database.count(db)
    assert counts["runs"] == seen
    # environments and clusters kept once each: far fewer than runs, but more than one of each
    assert 1 < counts["environments"] < counts["runs"] and 1 < counts["clusters"] < counts["runs"]
    # and history of every committed cell prints the same from the database as from the files
    files = json.loads(_out(capsys, history_view.cli, [*COMMITTED, "--json"]))
    stored = json.loads(_out(capsys, history_view.cli, ["--db", db, "--json"]))
    assert files.pop("files") == COMMITTED and stored.pop("files") == [db] and files == stored
    # and so does the report
    assert _out(capsys, generate.cli, [*COMMITTED, "--json"]) == _out(capsys, generate.cli, ["--db", db, "--json"])
    assert counts["figures"] == sum(len(v) for r in results.load(COMMITTED) for k, v in (r["metrics"] or {}).items()
                                    if k.startswith("rank_") and isinstance(v, list))


@pytest.mark.parametrize("bad_at", [0, 2, 4])
def test_a_corrupt_line_is_named_and_nothing_else_is_lost(tmp_path, db, bad_at, capsys):
    good = [json.loads(line) for line in open(DEMO)][:6]
    lines = [json.dumps(r) for r in good]
    lines.insert(bad_at, '{"schema": 1, "id": "torn')  # not JSON
    no_benchmark = dict(good[0], id="nobench")
    del no_benchmark["benchmark"]
    lines.insert(bad_at + 2, json.dumps(no_benchmark))  # JSON, not a record
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n" + '{"schema": 1, "tor')  # and a torn last line
    assert importer.cli(["import", str(path), "--db", db]) == 1
    err = capsys.readouterr().err
    named = [line.split("skipped ", 1)[1].split(": ", 1)[0] for line in err.splitlines()]
    assert named == [f"{path}:{bad_at + 1}", f"{path}:{bad_at + 3}", f"{path}:{len(lines) + 1}"]
    assert "benchmark: expected a non-empty string" in err
    assert [r["id"] for r in database.load(db)] == [r["id"] for r in good]


def test_a_log_is_read_for_its_result_lines_only(tmp_path, db):
    recs = synthetic.series(5, runs=3, at=None)
    log = tmp_path / "pod.log"
    log.write_text("starting\n" + "".join(f"2026-11-27T10:00:00Z {results.RESULT_PREFIX}{results.dumps(r)}\n"
                                          for r in recs) + "INFO done\n")
    done = importer.index([str(log)], db, tag="pod")
    assert done["problems"] == [] and len(done["new"]) == 3
    assert database.load(db, [("tag", "=", "pod")]) == recs


def test_four_importers_at_once_lose_and_double_nothing(tmp_path, db):
    """Two emulated machines, two importers each; each importer indexes its machine's file and a
    file both machines share (one machine's copy in the other order: their inserts of the same
    ids cross), so every record is offered two to four times, at once."""
    files = {}
    for name, seed in (("m1", 1), ("m2", 2), ("shared", 3)):
        files[name] = str(tmp_path / f"{name}.jsonl")
        for cell in range(3):
            for record in synthetic.series(seed * 10 + cell, runs=150, at=None, nodes=cell + 1):
                results.append(files[name], record)
    files["shared-reversed"] = str(tmp_path / "shared-reversed.jsonl")
    for record in results.load(files["shared"])[::-1]:
        results.append(files["shared-reversed"], record)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    jobs = [subprocess.Popen([sys.executable, "-m", "fleetbench", "results", "import", files[m], files[shared],
                              "--db", db], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for m in ("m1", "m2") for shared in ("shared", "shared-reversed")]
    outs = [job.communicate(timeout=300) for job in jobs]
    assert [job.returncode for job in jobs] == [0] * 4, outs
    stored = [r["id"] for r in database.load(db)]
    expected = {r["id"] for f in files.values() for r in results.load(f)}
    assert len(stored) == len(set(stored)) == len(expected) == 3 * 3 * 150
    assert set(stored) == expected
    # each record went in once: the importers' "new" counts add up to the whole
    new = sum(int(out.split(" record(s) read, ")[1].split(" new")[0]) for out, _ in outs)
    assert new == len(expected)
    # and each run's rank figures once, with it
    ranks = {r["id"]: len(r["metrics"]["rank_elapsed_s"]) for f in files.values() for r in results.load(f)}
    assert database.count(db)["figures"] == sum(ranks.values())


def test_a_store_of_another_schema_is_refused_by_name(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    importer.index([DEMO], url)
    eng = database.engine(url)
    with eng.begin() as conn:
        conn.exec_driver_sql("UPDATE schema_version SET version = 99")
    eng.dispose()
    with pytest.raises(database.StoreError, match=r"store schema 99, this fleetbench reads 1: rebuild"):
        database.load(url)
    with pytest.raises(database.StoreError, match="no fleetbench store there"):
        database.load(f"sqlite:///{tmp_path / 'empty.db'}")


# ---- every reader, both ways -------------------------------------------------------------------------

def _out(capsys, fn, argv) -> str:
    code = fn(argv)
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return out


def test_report_compare_history_explain_read_the_database_as_the_files(tmp_path, db, capsys):
    for path, tag in ((DEMO_OLD, "old"), (DEMO, "new"), (EXPLAIN, "explain")):
        importer.index([path], db, tag=tag)
    # report: the groups, and the section but for the name of its source (a filter narrows it)
    both = [r for r in results.load([DEMO_OLD]) if r["benchmark"] == "resnet50"]
    only = tmp_path / "resnet50.jsonl"
    only.write_text("".join(results.dumps(r) + "\n" for r in both))
    assert _out(capsys, generate.cli, [str(only), "--json"]) == \
        _out(capsys, generate.cli, ["--db", db, "--where", "benchmark=resnet50", "--where", "tag=old", "--json"])
    text_files = _out(capsys, generate.cli, [str(only), "--images", str(tmp_path / "i")])
    text_db = _out(capsys, generate.cli, ["--db", db, "--where", "benchmark=resnet50", "--where", "tag=old",
                                          "--images", str(tmp_path / "i")])
    source = f"`{db} [benchmark=resnet50, tag=old]`"
    assert text_files.replace(f"`{only}`", "SOURCE") == text_db.replace(source, "SOURCE")
    # compare: every figure, test and verdict (the sides' names aside)
    a = json.loads(_out(capsys, comparison.cli, [DEMO_OLD, DEMO, "--json"]))
    b = json.loads(_out(capsys, comparison.cli, ["--db", db, "--base", "tag=old", "--new", "tag=new", "--json"]))
    for report in (a, b):
        report["base"].pop("files"), report["new"].pop("files")
    assert a == b and a["cells"]
    # history: every series, change and explanation
    a = json.loads(_out(capsys, history_view.cli, [DEMO_OLD, DEMO, EXPLAIN, "--json"]))
    b = json.loads(_out(capsys, history_view.cli, ["--db", db, "--json"]))
    assert a.pop("files") != b.pop("files") and a == b
    # the shape's filters are numbers: the two-node cells of both demos, as a file of them reads
    two = tmp_path / "two.jsonl"
    two.write_text("".join(results.dumps(r) + "\n" for r in results.load([DEMO_OLD, DEMO]) if r["nodes"] == 2))
    assert _out(capsys, generate.cli, [str(two), "--json"]) == \
        _out(capsys, generate.cli, ["--db", db, "--where", "nodes=2", "--where", "until=2026-11-23", "--json"])
    # explain: its cells, named by the file each record came from
    assert _out(capsys, explain.cli, [EXPLAIN, "--json"]) == \
        _out(capsys, explain.cli, ["--db", db, "--where", "tag=explain", "--json"])


class _ServerError(Exception):
    def __init__(self, sqlstate, orig=None):
        super().__init__(sqlstate)
        self.sqlstate, self.orig = sqlstate, orig


def test_a_deadlock_is_retried_whether_the_driver_error_comes_bare_or_wrapped(monkeypatch):
    # the COPY path's raw psycopg cursor raises DeadlockDetected bare (sqlstate on the error), where
    # SQLAlchemy wraps it (sqlstate on .orig): a fresh clone's four importers lost two imports to
    # the bare one (2026-11-29). Anything else is raised at once.
    for first in (_ServerError("40P01"), _ServerError(None, orig=_ServerError("40P01"))):
        calls = []

        def flaky(eng, made, first=first):
            calls.append(1)
            if len(calls) == 1:
                raise first
            return ["a"]

        monkeypatch.setattr(database, "_write", flaky)
        assert database.write(None, {}) == ["a"] and len(calls) == 2
    monkeypatch.setattr(database, "_write", lambda eng, made: (_ for _ in ()).throw(_ServerError("23505")))
    with pytest.raises(_ServerError):
        database.write(None, {})
