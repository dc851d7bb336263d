"""This checkout's Airflow metadata database, shared by ``bench up`` and ``bench run``: chosen on first use and
recorded in ``var/airflow/metadata_db.json`` (mode 0600).

The local PostgreSQL server (127.0.0.1:5432, database ``benchflow_airflow_<8 hex of this checkout's var/ path>``,
created when missing) when it answers, else SQLite (``var/airflow/airflow.db``). PostgreSQL first because the
four components and every task process write the metadata database at the same time: SQLite takes one writer at
a time, so with the LocalExecutor running tasks in parallel (two campaigns on two hosts, a campaign's teardowns
side by side) writers wait on its lock and, past the busy timeout, fail with "database is locked"; Airflow
documents SQLite for development only. SQLite still works here for one campaign at a time, which is what a
laptop without PostgreSQL needs, so it is the fallback (parallelism 1 then). ``--db sqlite|postgres|<URI>`` (or
``BENCH_UP_DB``) chooses, and changes the record (the runs recorded in the other database stay there).

Imports nothing of Airflow: ``bench run`` sets Airflow's connection from it before Airflow reads its configuration.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from benchflow.paths import var_dir
from benchtools.net import port_open

PG_SERVER = ("127.0.0.1", 5432)
PG_DATABASE = "benchflow_airflow"


def airflow_home() -> Path:
    """This checkout's AIRFLOW_HOME, ``bench up``'s and ``bench run``'s alike."""
    return var_dir() / "airflow"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (it may hold a password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def _postgres_uri(database: str) -> str | None:
    """The local PostgreSQL server's URI for ``database``, or None if no server answers. Imports nothing of
    Airflow (``bench run`` sets Airflow's connection from it before Airflow reads its configuration);
    :func:`ensure_database` creates the database."""
    if not port_open(*PG_SERVER):
        return None
    host, port = PG_SERVER
    user = os.environ.get("BENCH_UP_PG_USER", "postgres")
    return f"postgresql+psycopg2://{user}@{host}:{port}/{database}"


def ensure_database(uri: str) -> None:
    """Create the metadata database at ``uri`` on the local PostgreSQL server when it is missing."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    if not uri.startswith("postgresql") or (url.host, url.port or 5432) != PG_SERVER or not url.database:
        return
    if not port_open(*PG_SERVER):
        return
    from benchflow.warehouse.hooks import ensure_postgres_database

    user, template = url.username or "postgres", template_name()  # a copy of the migrated one, when there is one
    if not ensure_postgres_database(PG_SERVER[0], PG_SERVER[1], user, url.database, template):
        raise RuntimeError(f"could not create the metadata DB {url.database} on {PG_SERVER[0]}:{PG_SERVER[1]}")


def pg_database() -> str:
    """This checkout's PostgreSQL database: one per ``var/`` folder (``BENCH_UP_PG_DATABASE`` names another)."""
    digest = hashlib.sha256(str(var_dir()).encode()).hexdigest()[:8]
    return os.environ.get("BENCH_UP_PG_DATABASE", f"{PG_DATABASE}_{digest}")


def record_path() -> Path:
    return airflow_home() / "metadata_db.json"


def matches(choice: str, uri: str) -> bool:
    if "://" in choice:
        return choice == uri
    return uri.startswith({"sqlite": "sqlite", "postgres": "postgresql"}.get(choice, uri))


def metadata_db(choice: str | None = None, out: Any = None) -> tuple[str, str]:
    """(SQLAlchemy URI, why) of this checkout's metadata database, shared by ``bench up`` and ``bench run``: the
    one recorded in ``var/airflow/metadata_db.json``, else (and when ``choice`` or ``BENCH_UP_DB`` asks for
    another) the one :func:`choose_database` picks, recorded."""
    choice = choice or os.environ.get("BENCH_UP_DB") or "auto"
    record = None
    with contextlib.suppress(OSError, ValueError, KeyError):
        found = json.loads(record_path().read_text())
        record = (str(found["uri"]), str(found["why"]))
    if record and (choice == "auto" or matches(choice, record[0])):
        return record[0], f"{record[1]} (this checkout's since its first use, in {record_path()}; --db changes it)"
    uri, why = choose_database(choice)
    if record and record[0] != uri:
        print(
            f"metadata DB: this checkout's changes from {shown(record[0])} to {shown(uri)}; the runs recorded in "
            "the former stay there and are not shown",
            file=out or sys.stderr,
        )
    write_private(record_path(), json.dumps({"uri": uri, "why": why}, indent=2))
    return uri, why


def shown(uri: str) -> str:
    """A URI without its password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(uri).render_as_string(hide_password=True)
    except Exception:
        return uri.split("://", 1)[0] + "://…"


def unreachable(uri: str) -> str | None:
    """Why the metadata database at ``uri`` cannot be used now (its server does not answer), or None."""
    if uri.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    try:
        url = make_url(uri)
    except Exception as exc:
        return f"the metadata DB URI is not readable: {exc}"
    host, port = url.host or "127.0.0.1", int(url.port or 5432)
    if port_open(host, port):
        return None
    return (
        f"this checkout's metadata DB ({shown(uri)}, recorded in {record_path()}) does not answer at {host}:{port}: "
        "start it, or choose another with bench up --db sqlite|postgres|URI (the runs recorded in it stay there)"
    )


def choose_database(choice: str | None) -> tuple[str, str]:
    """(SQLAlchemy URI, why) for ``choice`` (``postgres``, ``sqlite``, a URI, or None: PostgreSQL if it answers)."""
    choice = choice or os.environ.get("BENCH_UP_DB") or "auto"
    database = pg_database()
    db_file = airflow_home() / "airflow.db"
    sqlite = f"sqlite:///{db_file}"
    if "://" in choice:
        return choice, "as given"
    if choice == "sqlite":
        return sqlite, "SQLite as asked: one campaign at a time (parallelism 1)"
    uri = _postgres_uri(database)
    if uri:
        return uri, (
            f"the local PostgreSQL at {PG_SERVER[0]}:{PG_SERVER[1]}, database {database}: the components "
            "and parallel tasks write it at once, which SQLite cannot take"
        )
    if choice == "postgres":
        raise RuntimeError(f"no PostgreSQL server answers at {PG_SERVER[0]}:{PG_SERVER[1]} (user postgres, trust)")
    return sqlite, (
        f"SQLite ({db_file}): no PostgreSQL answers at {PG_SERVER[0]}:"
        f"{PG_SERVER[1]}; one campaign at a time (parallelism 1, SQLite takes one writer)"
    )


def template_name() -> str:
    """The migrated template's name: one per Airflow version (:func:`migrated_template`)."""
    from importlib.metadata import version

    return f"benchflow_airflow_template_{hashlib.sha256(version('apache-airflow').encode()).hexdigest()[:10]}"


def migrated_template(env: dict[str, str] | None = None, timeout: float = 900) -> str:
    """The name of a PostgreSQL database on the local server holding Airflow's metadata tables migrated for this
    Airflow version, made once per server and version (``airflow db migrate`` into a database of a temporary
    name, renamed when done, under a lock that other processes wait on): a new metadata DB is then a copy of it
    (``CREATE DATABASE … TEMPLATE``, a file copy) instead of a migration from empty. Used by the tests and the
    stack launcher."""
    import fcntl
    import subprocess
    import tempfile

    from benchflow.warehouse.hooks import (
        create_postgres_database,
        drop_postgres_database,
        postgres_database_exists,
        rename_postgres_database,
    )

    name = template_name()
    lock = Path(tempfile.gettempdir()) / f"{name}.lock"
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if postgres_database_exists(name):
            return name
        building = f"{name}_building"
        drop_postgres_database(building)
        create_postgres_database(building)
        host, port = PG_SERVER
        environ = {k: v for k, v in (env or os.environ).items() if not k.startswith("AIRFLOW__DATABASE__")}
        environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"postgresql+psycopg2://postgres@{host}:{port}/{building}"
        airflow = str(Path(sys.executable).parent / "airflow")
        done = subprocess.run(
            [airflow, "db", "migrate"], env=environ, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            drop_postgres_database(building)
            raise RuntimeError(f"airflow db migrate of the template failed:\n{(done.stdout + done.stderr)[-3000:]}")
        rename_postgres_database(building, name)
        return name
