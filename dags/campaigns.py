"""Campaign DAGs (Airflow): every spec in ``include/campaigns/*.yaml`` becomes the DAG ``bench_<name>``.

Parsing this file reads YAML and nothing else: no connection, Variable, network or database, and
no pandas, torch or GX import. Every spec is built on its own: one that fails validation (or, should
it get that far, fails to build) is left out and logged with its file, line and field, and every
other campaign still loads. ``dags/campaign_errors.py`` shows the rejected specs as an import error in
the Airflow UI; ``bench validate`` reports the same before deployment.
"""

from __future__ import annotations

import logging

from benchflow.factory import build_all

log = logging.getLogger(__name__)

_dags, _errors = build_all()
for _error in _errors:
    log.error("campaign spec rejected, no DAG built:\n%s", _error)
for _dag in _dags:
    globals()[_dag.dag_id] = _dag
