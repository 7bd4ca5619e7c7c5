"""The database index of result records: SQLite by default, PostgreSQL for a team, one schema
(SQLAlchemy Core; psycopg 3 is the PostgreSQL driver). docs/guide/history.md argues the choice.

The JSONL files stay the source that runs append to; the database is an index of them that can
always be rebuilt by importing them again: a record's `id` is unique, so importing a file twice adds
nothing, and four importers at once lose and double nothing (the unique constraint decides; SQLite
runs in WAL mode, every write transaction `BEGIN IMMEDIATE` with a busy timeout, so writers queue
rather than fail; PostgreSQL's own locking does the same).

Tables:
  schema_version  one row: the schema this store was made with (SCHEMA_VERSION; a newer store is
                  refused by name rather than misread)
  environments    hash → canonical JSON of a run's software and machine (`environment`)
  clusters        hash → canonical JSON of the job's shape and fabric (`cluster`)
  runs            one row per record: its id, the columns a filter reads (time, benchmark, preset,
                  mode, method, shape, network and source by name, commit, Paddle version, tag,
                  throughput, unit, error: scalars; the record keeps the objects), where it came from (file, line), its two hashes, and the rest of the
                  record as JSON (the env's per-run part: launcher variables, free memory)
  figures         the ranks' figures of a run: (run, name, rank, value) from its `rank_*` lists

Each of the two blocks is kept once, as canonical JSON (keys sorted, no spaces) and its SHA-256:
two runs share a history only when their blocks are equal, which the hash says without reading them.

A record read back is the record imported, exactly (tests/unit/test_store.py holds the committed
results to it), so every reader prints the same from the database as from the files.
"""
from __future__ import annotations

import hashlib
import json
import operator
import os

from fleetbench import cmdline
from fleetbench.measure.repeats import experiment
from fleetbench.store import results
from fleetbench.store.schema import Record

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60  # a writer waits this long for another's transaction (SQLite)
BATCH = 2000  # lines a worker prepares at once, and records a transaction: few commits, a short lock
LOOKUP = 1000  # values of one IN (...) list
CHECKPOINT_PAGES = 25_600  # 100 MiB of 4 KiB pages
CACHE_KIB = 64 * 1024  # SQLite's page cache: the id indices of 100,000 runs stay in memory while importing


class StoreError(cmdline.UserError):
    """A database that cannot be used, named with its URL (one line)."""


def _tables():
    import sqlalchemy as sa
    meta = sa.MetaData()
    sa.Table("schema_version", meta, sa.Column("version", sa.Integer, nullable=False))
    for name in ("environments", "clusters"):
        sa.Table(name, meta, sa.Column("hash", sa.String(64), primary_key=True),
                 sa.Column("json", sa.Text, nullable=False))
    sa.Table("runs", meta,
             sa.Column("seq", sa.Integer, sa.Identity(), primary_key=True),
             sa.Column("id", sa.String(64), nullable=False, unique=True),
             *(sa.Column(n, sa.String(200), index=n in ("benchmark", "time", "git", "tag"))
               for n in ("time", "benchmark", "preset", "mode", "method", "source", "network", "git",
                         "paddle", "tag", "unit", "file")),
             *(sa.Column(n, sa.Integer) for n in ("line", "nodes", "devices_per_node", "world_size")),
             sa.Column("throughput", sa.Float), sa.Column("error", sa.Text),
             sa.Column("env_hash", sa.String(64), sa.ForeignKey("environments.hash"), nullable=False),
             sa.Column("cluster_hash", sa.String(64), sa.ForeignKey("clusters.hash"), nullable=False),
             sa.Column("rest", sa.Text, nullable=False))
    # a run has a figure per rank and name (5 a run at 100,000 runs of 1 to 10 nodes): one B-tree keyed
    # by (run, name, rank), which serves the lookups by run too, rather than a table, its key and an
    # index of run ids (three B-trees to write a row into; bench/history_store.py)
    sa.Table("figures", meta,
             sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=False),
             sa.Column("name", sa.String(100), nullable=False), sa.Column("rank", sa.Integer, nullable=False),
             sa.Column("value", sa.Float), sa.PrimaryKeyConstraint("run_id", "name", "rank"),
             sqlite_with_rowid=False)
    return meta


_META = None


def tables():
    global _META
    if _META is None:
        _META = _tables()
    return _META.tables


def engine(url: str):
    """An Engine for `url` (sqlite:///PATH or postgresql://...; a bare path is SQLite's), with
    SQLite set for several writers: WAL, a busy timeout, write transactions taken at BEGIN."""
    import sqlalchemy as sa
    url = normalize(url)
    if url.startswith("sqlite"):
        eng = sa.create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S, "isolation_level": None})

        @sa.event.listens_for(eng, "connect")
        def _pragmas(dbapi_conn, _record):
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            # the store is an index of files that stay the source: a commit need not wait for the disk
            # (WAL's NORMAL survives a crash of the program; a power loss can undo the last imports,
            # which importing the files again redoes); FULL's flush a transaction was a tenth of an import
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")
            dbapi_conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            # the WAL is copied into the database (and that flushed to disk) every CHECKPOINT_PAGES
            # written rather than SQLite's 1000 (4 MB: after every transaction of an import)
            dbapi_conn.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
            dbapi_conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
            dbapi_conn.execute("PRAGMA foreign_keys=ON")

        @sa.event.listens_for(eng, "begin")
        def _begin(conn):  # pysqlite's own BEGIN is deferred: two readers upgrading to write deadlock
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        return eng
    return sa.create_engine(url)


def normalize(url: str) -> str:
    """`sqlite:///…` and `postgresql://…` as given (postgresql:// uses psycopg 3); a path is SQLite."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if "://" not in url:
        return f"sqlite:///{url}"
    return url


def open_store(url: str, create: bool = True):
    """The engine of a store whose schema is this one's (made when `create` and absent);
    StoreError naming the URL otherwise."""
    import sqlalchemy as sa
    where = sa.engine.make_url(normalize(url))
    if not create and where.get_backend_name() == "sqlite" and where.database not in (None, "", ":memory:") \
            and not os.path.exists(where.database):  # connecting would make an empty file
        raise StoreError(f"--db {url}: no fleetbench store there (no such file; import records first: "
                         f"fleetbench results import FILE... --db {url})")
    try:
        eng = engine(url)
        with eng.begin() as conn:
            if conn.dialect.name == "postgresql":  # two importers creating the schema at once
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(48048)")
            have = sa.inspect(conn).has_table("schema_version")
            if not have and not create:
                raise StoreError(f"--db {url}: no fleetbench store there (import records first: "
                                 f"fleetbench results import FILE... --db {url})")
            if not have:
                _tables().create_all(conn)
                conn.execute(tables()["schema_version"].insert().values(version=SCHEMA_VERSION))
            version = conn.execute(sa.select(tables()["schema_version"].c.version)).scalar()
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(f"--db {url}: {str(exc.orig if hasattr(exc, 'orig') else exc).splitlines()[0]}") from None
    if version != SCHEMA_VERSION:
        raise StoreError(f"--db {url}: store schema {version}, this fleetbench reads {SCHEMA_VERSION}: "
                         "rebuild it from the JSONL files (fleetbench results import FILE... --db NEW_URL)")
    return eng


# ---- a record in rows, and back ---------------------------------------------------------------------

def canonical(block) -> str:
    return json.dumps(block, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# env keys that are a run's own, not its environment: a job id, endpoints, free memory
RUN_OWN = ("env_vars", "memory", "unavailable")


def environment(record: Record) -> dict:
    """The software and machine a run ran on: its env block without what differs from run to run
    (the launcher's variables, free memory), and fleetbench's commit."""
    env = record.env
    total = env.memory_total_mib if env else None
    return {"env": {k: v for k, v in env.doc.items() if k not in RUN_OWN} if env else {},
            "memory_gib": round(total / 1024) if total else None, "fleetbench": record.git}


def cluster(record: Record) -> dict:
    """The job's shape and fabric: nodes, devices per node, world size, device model, network,
    interconnect (InfiniBand devices, the topology matrix) and the hosts' executor."""
    env = record.env
    gpus = " + ".join(sorted(set(env.gpus))) if env else ""
    return {"nodes": record.nodes, "devices_per_node": record.devices_per_node, "world_size": record.world_size,
            "device": gpus or (env.cpu_model if env else None), "network": record.network,
            "infiniband": list(env.infiniband) if env else [], "topology": record.topology,
            "executor": record.launch["executor"] if record.launch else None}


def rows(record, where: str, tag: str | None) -> dict:
    """{"environments": row, "clusters": row, "runs": row, "figures": [rows]} of one record (a
    Record, or a validated schema-1 object)."""
    record = Record.of(record)
    env_text = canonical(environment(record))
    cluster_text = canonical(cluster(record))
    env, metrics = record.env, record.metrics
    rest = {k: v for k, v in record.items() if k != "env"}
    rest["env"] = None if env is None else {k: v for k, v in env.doc.items() if k in RUN_OWN}
    path, _, line = where.rpartition(":")
    run = {"id": record.id, "time": record.time, "benchmark": record.benchmark, "preset": record.preset,
           "mode": record.mode, "method": record.method, "source": record.source.name if record.source else None,
           "network": experiment.network_name(record.network), "git": record.git,
           "paddle": env.paddle.version if env and env.paddle else None, "tag": tag, "unit": metrics.unit,
           "file": path, "line": int(line) if line.isdigit() else None, "nodes": record.nodes,
           "devices_per_node": record.devices_per_node, "world_size": record.world_size,
           "throughput": _number(metrics.throughput), "error": record.error,
           "env_hash": digest(env_text), "cluster_hash": digest(cluster_text),
           "rest": results.dumps(rest)}
    figures = [{"run_id": record.id, "name": name, "rank": rank, "value": _number(value)}
               for name, per_rank in sorted(metrics.doc.items())
               if name.startswith("rank_") and isinstance(per_rank, list)
               for rank, value in enumerate(per_rank)]
    return {"environments": {"hash": run["env_hash"], "json": env_text},
            "clusters": {"hash": run["cluster_hash"], "json": cluster_text}, "runs": run, "figures": figures}


def _number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def record_of(rest_text: str, env: dict | None) -> Record:
    """The record a row was made from (`rows` inverted), given its environment's block (`env` of
    the environments row's JSON)."""
    doc = json.loads(rest_text)
    own = doc.pop("env")
    doc["env"] = None if own is None else {**env, **own}
    return Record.of(doc)


# ---- writing ----------------------------------------------------------------------------------------

def _insert(conn, table, values: list[dict]) -> None:
    """INSERT … ON CONFLICT DO NOTHING of `values` (SQLite and PostgreSQL say it alike): the
    statement compiled once, the rows handed to the driver's executemany (SQLAlchemy's own
    executemany builds each row's parameters anew: most of writing the figures)."""
    if not values:
        return
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    compiled = insert(table).on_conflict_do_nothing().compile(dialect=conn.dialect, column_keys=list(values[0]))
    params = list(map(operator.itemgetter(*compiled.positiontup), values)) if compiled.positional else values
    conn.exec_driver_sql(str(compiled), params)


def batch_rows(batch: list[tuple[str, dict]], tag: str | None = None) -> dict:
    """The rows of (where, record) pairs, each environment and cluster once: {"environments":
    {hash: row}, "clusters": {hash: row}, "runs": [row], "figures": [row]}."""
    out: dict = {"environments": {}, "clusters": {}, "runs": [], "figures": []}
    for where, record in batch:
        made = rows(record, where, tag)
        for name in ("environments", "clusters"):
            out[name].setdefault(made[name]["hash"], made[name])
        out["runs"].append(made["runs"])
        out["figures"] += made["figures"]
    return out


DEADLOCK = ("40P01", "40001")  # PostgreSQL: deadlock detected, serialization failure
RETRIES = 5


def write(eng, made: dict) -> list[str]:
    """Index one `batch_rows` in one transaction; the ids that were new. Whichever of two
    importers inserts an id first wins; the other's insert of it does nothing. Two PostgreSQL
    importers inserting the same ids in other orders can deadlock: the server aborts one, which
    runs its transaction again (the rows stay in file order, the order they are read back in)."""
    for attempt in range(RETRIES):
        try:
            return _write(eng, made)
        except Exception as exc:  # noqa: BLE001 (re-raised unless the server aborted it for a deadlock)
            if _sqlstate(exc) not in DEADLOCK or attempt == RETRIES - 1:
                raise
    return []


def _sqlstate(exc: Exception) -> str | None:
    """PostgreSQL's error code: SQLAlchemy wraps the driver's error (`orig`); the COPY path's
    raw psycopg cursor raises it bare (a deadlock there is retried too)."""
    return getattr(getattr(exc, "orig", None) or exc, "sqlstate", None)


def _write(eng, made: dict) -> list[str]:
    import sqlalchemy as sa
    t = tables()
    with eng.begin() as conn:
        ids = [run["id"] for run in made["runs"]]
        have = set(conn.execute(sa.select(t["runs"].c.id).where(t["runs"].c.id.in_(ids))).scalars())
        runs = []  # in file order (read back so), an id offered twice taken the first time, as the insert would
        for run in made["runs"]:
            if run["id"] not in have:
                have.add(run["id"])
                runs.append(run)
        if not runs:  # imported before: nothing to write
            return []
        for name in ("environments", "clusters"):
            _insert(conn, t[name], sorted(made[name].values(), key=lambda r: r["hash"]))
        if conn.dialect.name == "sqlite":  # BEGIN IMMEDIATE took the write lock before the lookup: no other
            _insert(conn, t["runs"], runs)  # writer can have added one of these since, so all of them are new
            fresh = {run["id"] for run in runs}
            _insert(conn, t["figures"], [f for f in made["figures"] if f["run_id"] in fresh])
        else:  # another importer may have committed some of them since the lookup: the insert says which went in
            fresh = _copy_runs(conn, runs)
            _copy_figures(conn, [f for f in made["figures"] if f["run_id"] in fresh])
    return [run["id"] for run in runs if run["id"] in fresh]


# PostgreSQL takes rows fastest through COPY: at 100,000 records a statement a figure (psycopg's
# executemany) was 550,000 round trips, and the runs' multi-row INSERT ... VALUES statements, each
# hundreds of kilobytes, were mostly psycopg parsing its own query text (an import took 85 s, then 27).

def _copy_runs(conn, runs: list[dict]) -> set[str]:
    """Insert `runs` (in file order) unless another importer has: COPY into a temporary table,
    then INSERT ... SELECT ... ON CONFLICT DO NOTHING, which says which ids went in."""
    cols = list(runs[0])
    names = ", ".join(cols)
    with conn.connection.driver_connection.cursor() as cursor:  # psycopg 3, in the transaction conn holds
        cursor.execute(f"CREATE TEMPORARY TABLE runs_in ON COMMIT DROP AS SELECT 0 AS ord, {names} FROM runs "
                       "WITH NO DATA")
        _copy(cursor, "runs_in", ["ord", *cols], ((i, *(run[c] for c in cols)) for i, run in enumerate(runs)))
        # ordered: a run's seq is the order it is read back in, the file's
        cursor.execute(f"INSERT INTO runs ({names}) SELECT {names} FROM runs_in ORDER BY ord "
                       "ON CONFLICT (id) DO NOTHING RETURNING id")
        return {row[0] for row in cursor.fetchall()}


def _copy_figures(conn, figures: list[dict]) -> None:
    """The figures of runs this transaction inserted. No other importer can hold a figure of these
    runs (a run's figures are written with it, by whoever inserted it): nothing can conflict."""
    cols = ["run_id", "name", "rank", "value"]
    with conn.connection.driver_connection.cursor() as cursor:
        _copy(cursor, "figures", cols, ((f[c] for c in cols) for f in figures))


def _copy(cursor, table: str, cols: list[str], rows) -> None:
    """COPY `rows` (iterables of values in `cols`' order) into `table` through psycopg's cursor."""
    with cursor.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(tuple(row))


# ---- reading ----------------------------------------------------------------------------------------

def load(url: str, where=(), files: bool = False) -> list:
    """The records of the store at `url` that pass every filter of `where` ((column, op, value),
    store/select.py), in the order they were imported; with `files`, (file imported from, record).
    Each environment is read and parsed once (the runs name it by hash), not once a run: most of
    reading a store was parsing the same environments again. The records of one environment share
    its blocks, which no reader changes."""
    import sqlalchemy as sa
    t = tables()
    eng = open_store(url, create=False)
    runs = t["runs"]
    query = (sa.select(runs.c.rest, runs.c.env_hash, runs.c.file)
             .where(*[_condition(runs, *w) for w in where]).order_by(runs.c.seq))
    try:
        with eng.connect() as conn:
            found = conn.execute(query).all()
            hashes = sorted({env for _, env, _ in found})
            envs = {}
            for at in range(0, len(hashes), LOOKUP):  # a statement's parameters are limited (SQLite: 32766)
                envs.update((h, json.loads(text)["env"]) for h, text in conn.execute(
                    sa.select(t["environments"].c.hash, t["environments"].c.json)
                    .where(t["environments"].c.hash.in_(hashes[at:at + LOOKUP]))))
        out = [(path, record_of(rest, envs[env])) if files else record_of(rest, envs[env])
               for rest, env, path in found]
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(f"--db {url}: {str(getattr(exc, 'orig', exc)).splitlines()[0]}") from None
    finally:
        eng.dispose()
    return out


def _condition(runs, column: str, op: str, value):
    col = runs.c[column]
    if op == "prefix":
        return col.startswith(value, autoescape=True)
    if op == ">=":
        return col >= value
    if op == "<":
        return col < value
    return col == value


def count(url: str) -> dict:
    """{table: rows} of the store (tests, `fleetbench results import`'s summary)."""
    import sqlalchemy as sa
    eng = open_store(url, create=False)
    with eng.connect() as conn:
        out = {name: conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()
               for name, table in tables().items() if name != "schema_version"}
    eng.dispose()
    return out
