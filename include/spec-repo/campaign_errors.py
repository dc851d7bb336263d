"""The campaign specs beside this file that were rejected, as one import error in the Airflow UI: the spec
repository's copy of ``dags/campaign_errors.py`` (no DAG defined here; see ``campaigns.py``)."""

from __future__ import annotations

from pathlib import Path

from benchflow.factory import raise_rejected

raise_rejected(Path(__file__).parent)
