"""The project's Airflow on this machine: where its home, DAGs and plugins are, and the host pools."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from benchflow.paths import PROJECT_ROOT, var_dir

# plugins/.airflowignore is read as regular expressions: Airflow's default (glob) goes through a pathspec pattern
# class that prints a DeprecationWarning in every process that loads plugins (on stdout, before `bench sql`'s rows).
# The task SDK's plugin loader reads the file as glob whatever the setting says, so the CLI also silences that one
# warning (Airflow's, about its own use of pathspec; nothing for this project to change).
IGNORE_FILE_SYNTAX = "regexp"
PROCESS_CONTEXT = "_AIRFLOW_PROCESS_CONTEXT"  # the SDK's: "server" reads connections from the metadata DB
_PATHSPEC_DEPRECATION = r"GitWildMatchPattern \('gitwildmatch'\) is deprecated"


def configure_airflow() -> None:
    """Point Airflow at this project unless the environment already does (a deployment, the tests): this
    checkout's Airflow home and metadata database, the ones ``bench up`` uses too (so every ``bench run`` is in
    its UI; :func:`benchtools.metadata_db.metadata_db` chooses and records the database)."""
    home = var_dir() / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    defaults = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX": IGNORE_FILE_SYNTAX,
        "GX_ANALYTICS_ENABLED": "false",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    # Outside a task the SDK's connection lookup reads the metadata DB only in a process that says it is a server
    # (as the api-server and the scheduler do); otherwise a connection made in the UI, the REST API or `bench
    # airflow connections add` is "not defined" to bench sql, bench compare and bench run's report. This process
    # has the metadata DB; a task's code (dag.test's, with its supervisor's comms) still asks through them.
    os.environ.setdefault(PROCESS_CONTEXT, "server")
    if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in os.environ:
        from benchtools.metadata_db import ensure_database, metadata_db, unreachable

        uri = metadata_db()[0]  # before anything imports Airflow: it reads its connection once
        os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = uri
        if unreachable(uri) is None:
            ensure_database(uri)
    import airflow.configuration  # noqa: F401  (it puts "show Airflow's deprecation warnings" first; ours goes before)

    warnings.filterwarnings("ignore", message=_PATHSPEC_DEPRECATION, category=DeprecationWarning)


def default_warehouse_only() -> bool:
    """Whether nothing names a warehouse besides the default DuckDB file, so a reader may open its snapshot without
    Airflow (``bench sql`` then starts in about a second instead of three): no ``AIRFLOW_CONN_BENCH_WAREHOUSE``, no
    secrets backend (in the environment or the Airflow home's ``airflow.cfg``), and no connection
    ``bench_warehouse`` in this checkout's metadata DB (read with SQLAlchemy alone). Anything unsure (the metadata
    DB not answering) is False: Airflow then looks the connection up and reports what is wrong."""
    import configparser

    if os.environ.get("AIRFLOW_CONN_BENCH_WAREHOUSE") or os.environ.get("AIRFLOW__SECRETS__BACKEND"):
        return False
    config = configparser.ConfigParser(interpolation=None)
    home = Path(os.environ.get("AIRFLOW_HOME") or var_dir() / "airflow")
    try:
        config.read(home / "airflow.cfg")
    except configparser.Error:
        return False
    if config.get("secrets", "backend", fallback="").strip():
        return False
    return not _connection_in_metadata_db("bench_warehouse")


def _connection_in_metadata_db(conn_id: str) -> bool:
    """Whether the metadata DB holds the connection (True also when it cannot be asked)."""
    import sqlalchemy

    uri = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    if not uri:
        from benchtools.metadata_db import metadata_db

        uri = metadata_db()[0]
    engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as con:
            table = sqlalchemy.table("connection", sqlalchemy.column("conn_id"))  # Airflow's, read by name
            query = sqlalchemy.select(table.c.conn_id).where(table.c.conn_id == conn_id)
            return con.execute(query).first() is not None
    except sqlalchemy.exc.ProgrammingError:  # PostgreSQL: no table yet (never migrated), so no connection
        return False
    except sqlalchemy.exc.SQLAlchemyError as exc:
        return "no such table" not in str(exc)  # SQLite's missing table; anything else: unsure
    finally:
        engine.dispose()


def ensure_pools() -> list[str]:
    """Create the one-slot pool of every host that a valid spec names; an existing pool is left as its
    operators set it. Needs Airflow's metadata database (run after ``airflow db migrate``)."""
    from airflow.models.pool import Pool

    from benchflow.spec import host_pool, load_all

    specs, _ = load_all()
    lines = []
    wanted = {host_pool(spec.host): (1, f"one benchmark campaign at a time on host {spec.host}") for spec in specs}
    for spec in specs:
        if spec.pool_slots > 1:
            wanted[spec.pool] = (spec.pool_slots, f"campaign {spec.name} on its hosts {', '.join(spec.host_ids)}")
    for name, (slots, description) in sorted(wanted.items()):
        pool = Pool.get_pool(name)
        if pool is None:
            pool = Pool.create_or_update_pool(name, slots, description, include_deferred=False)
            lines.append(f"{name}: created, {pool.slots} slot(s)")
        else:
            lines.append(f"{name}: exists, {pool.slots} slot(s)")
    return lines


def quiet_short_secrets() -> None:
    """No "Skipping masking for a secret as it's too short" line before a command's answer: Airflow warns once per
    process, when it reads a connection whose secret is too short to mask in a task's log; a bench command's output
    has no task log, only the answer. Call it where the command reads Airflow connections."""
    from airflow.sdk._shared.secrets_masker.secrets_masker import SecretsMasker

    SecretsMasker._has_warned_short_secret = True
    try:
        from airflow._shared.secrets_masker.secrets_masker import SecretsMasker as CoreMasker
    except ImportError:  # the SDK's copy alone
        return
    CoreMasker._has_warned_short_secret = True
