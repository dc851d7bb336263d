"""The project's Airflow on this machine: where its home, DAGs and plugins are, and the host pools."""

from __future__ import annotations

import os

from benchflow.paths import PROJECT_ROOT, var_dir


def configure_airflow() -> None:
    """Point Airflow at this project unless the environment already does (a deployment, the tests)."""
    home = var_dir() / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    defaults = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "GX_ANALYTICS_ENABLED": "false",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


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
