"""Campaign DAGs (Airflow): every spec in ``include/campaigns/*.yaml`` becomes the DAG ``bench_<name>``.

Parsing this file reads YAML and nothing else: no connection, Variable, network or database, and
no pandas, torch or GX import. A spec that fails validation is left out and logged with its file,
line and field; ``bench validate`` (and the test suite) report the same errors before deployment.
"""

from __future__ import annotations

import logging

from benchflow.factory import build_dag
from benchflow.spec import load_all

log = logging.getLogger(__name__)

_specs, _errors = load_all()
for _error in _errors:
    log.error("campaign spec rejected, no DAG built:\n%s", _error)
for _spec in _specs:
    globals()[_spec.dag_id] = build_dag(_spec)
