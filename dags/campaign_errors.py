"""The campaign specs that were rejected, as one import error in the Airflow UI (campaign DAGs).

``dags/campaigns.py`` builds every good spec and leaves the bad ones out, so that one careless edit never
takes the nightly campaigns down with it; this file fails to import when, and only when, some spec was
rejected, and its error lists each problem by file, line and field. It defines no DAG and builds none: it reads
and checks every spec within the same per-spec time budget (the spec's size limits bound what building it
costs), so the specs are built once per parse, by ``dags/campaigns.py``. A spec that passes its checks and still
fails to build is logged there, and ``bench validate`` (which builds) names it before deployment.
"""

from __future__ import annotations

from benchflow.factory import raise_rejected

raise_rejected()
