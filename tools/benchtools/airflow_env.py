"""The project's Airflow on this machine: where its home, DAGs and plugins are, and the host pools."""

from __future__ import annotations

import os
import warnings

from benchflow.paths import PROJECT_ROOT, var_dir

# plugins/.airflowignore is read as regular expressions: Airflow's default (glob) goes through a pathspec pattern
# class that prints a DeprecationWarning in every process that loads plugins (on stdout, before `bench sql`'s rows).
# The task SDK's plugin loader reads the file as glob whatever the setting says, so the CLI also silences that one
# warning (Airflow's, about its own use of pathspec; nothing for this project to change).
IGNORE_FILE_SYNTAX = "regexp"
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
    if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in os.environ:
        from benchtools.metadata_db import ensure_database, metadata_db, unreachable

        uri = metadata_db()[0]  # before anything imports Airflow: it reads its connection once
        os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = uri
        if unreachable(uri) is None:
            ensure_database(uri)
    import airflow.configuration  # noqa: F401  (it puts "show Airflow's deprecation warnings" first; ours goes before)

    warnings.filterwarnings("ignore", message=_PATHSPEC_DEPRECATION, category=DeprecationWarning)


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
