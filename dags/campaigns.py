"""Campaign DAGs (Airflow): every spec in ``include/campaigns/*.yaml`` becomes the DAG ``bench_<name>``.

Parsing this file reads YAML and nothing else: no connection, Variable, network or database, and
no pandas, torch or GX import. Every spec is built on its own: one that fails validation (or, should
it get that far, fails to build) is left out and logged with its file, line and field, and every
other campaign still loads. ``dags/campaign_errors.py`` shows the rejected specs as an import error in
the Airflow UI; ``bench validate`` reports the same before deployment.

A worker that parses this file to run one task (Airflow's parsing context names the DAG) builds that
campaign's DAG alone: a fleet of many campaigns costs each task one spec, not all of them.
"""

from __future__ import annotations

from benchflow.factory import define_campaigns

define_campaigns(globals())
