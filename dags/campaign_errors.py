"""The campaign specs that were rejected, as one import error in the Airflow UI (campaign DAGs).

``dags/campaigns.py`` builds every good spec and leaves the bad ones out, so that one careless edit never
takes the nightly campaigns down with it; this file fails to import when, and only when, some spec was
rejected, and its error lists each problem by file, line and field. It defines no DAG. It builds every DAG as
``dags/campaigns.py`` does (and throws them away), so a spec whose build fails or runs past its time budget is
listed here too, not only in that file's log.
"""

from __future__ import annotations

from benchflow.factory import build_all
from benchflow.spec import RejectedSpecs

_, _errors = build_all(register=False)
if _errors:
    raise RejectedSpecs(_errors)
