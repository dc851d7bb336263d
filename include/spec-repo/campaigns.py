"""Campaign DAGs (Airflow) of the specs beside this file: copy it, with ``campaign_errors.py``, into a repository
of campaign specs that Airflow reads through a git DAG bundle (docs/campaigns.md, "Specs from git").

Every ``*.yaml`` here becomes the DAG ``bench_<name>``, exactly as ``dags/campaigns.py`` builds the campaigns
folder's (benchflow is on the workers' path, from the deployment's plugins folder). Each run then records this
repository's commit in ``runs.spec_commit``, beside the payload's.
"""

from __future__ import annotations

from pathlib import Path

from benchflow.factory import define_campaigns

define_campaigns(globals(), Path(__file__).parent)
