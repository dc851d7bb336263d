"""Report DAG (Airflow): whenever a campaign's load emits the ``bench_results`` Asset, draw its plots.

For each triggering load (its dag_id and run_id ride on the asset event), PNGs go next to that run's
artifacts in the artifact store, and their paths appear in the task log. Nothing here touches a database at parse time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Asset, task

with DAG(
    dag_id="bench_report",
    schedule=[Asset("bench_results")],
    start_date=datetime(2026, 1, 1),  # naive: Airflow reads it as UTC
    catchup=False,
    is_paused_upon_creation=False,  # it draws every load's plots; the campaigns start paused
    tags=["bench", "report"],
    doc_md=__doc__,
) as dag:

    @task
    def render_plots(**context: Any) -> list[str]:
        from benchflow import artifacts
        from benchflow.analysis import plots
        from benchflow.warehouse import Warehouse

        warehouse = Warehouse.from_airflow(read_only=True)
        written = []
        runs, ignored = plots.report_targets(context["triggering_asset_events"])
        for why in ignored:
            print(f"ignored {why}")
        for dag_id, run_id in runs:
            out = artifacts.store(dag_id, run_id) / artifacts.REPORT_DIR
            written += plots.render(warehouse, dag_id, run_id, out)
            print(f"{dag_id} {run_id}: verdict: {plots.verdict_line(warehouse, dag_id, run_id)}")
        for path in written:
            print(f"plot: {path}")
        return [str(p) for p in written]

    render_plots()
