"""A throwaway PostgreSQL server for a test session: Debian's `postgresql` package (tools/deps.sh
installs it), `initdb` and `pg_ctl` run as the unprivileged `postgres` user in a temporary directory,
listening on a free port of 127.0.0.1 (and a unix socket in that directory), trust authentication
for local connections only; stopped and removed at the end."""
from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile


def bindir() -> str | None:
    """The newest installed server's bin directory (/usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


def missing() -> str | None:
    """Why no server can be started here, or None."""
    if not bindir():
        return "PostgreSQL is not installed (make deps installs Debian's postgresql)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user (Debian's postgresql package makes it)"
    if os.geteuid() != 0:
        return "starting a server as the postgres user needs root (runuser)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(*argv: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, timeout=120)


@contextlib.contextmanager
def server():
    """Yields the URL of a fresh server's `postgres` database (as its superuser `postgres`)."""
    top = tempfile.mkdtemp(prefix="fbpg.", dir="/tmp")
    user = pwd.getpwnam("postgres")
    os.chown(top, user.pw_uid, user.pw_gid)
    data, port, tools = os.path.join(top, "data"), _free_port(), bindir()
    try:
        _as_postgres(f"{tools}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {top} -c fsync=off -c max_connections=40"
        _as_postgres(f"{tools}/pg_ctl", "-D", data, "-o", options, "-l", os.path.join(top, "log"), "-w", "start")
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            _as_postgres(f"{tools}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(top, ignore_errors=True)


def fresh_database(url: str, name: str) -> str:
    """A new empty database on the server at `url`; its URL."""
    import sqlalchemy as sa
    eng = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    eng.dispose()
    return url.rsplit("/", 1)[0] + "/" + name
