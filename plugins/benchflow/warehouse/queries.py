"""Every read the project makes of the warehouse, one named function each: what the Benchmarks view, the
analyses (regressions, comparisons, plots), ``bench run`` and the pipeline ask. Each takes a
:class:`~benchflow.warehouse.Warehouse` and plain values, and returns a DataFrame (or a value); none writes.

Placeholders are the backend's (``w.p``); table and column names come from the kinds' declarations, never from
a caller's text. A new question for the UI is one function here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchflow.warehouse import kindsql

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.kinds import ResultKind
    from benchflow.warehouse import Warehouse

RUN_TIME = "COALESCE(logical_date, started_at)"  # when a run counts as having run: its logical date, else its start


# -- one run ---------------------------------------------------------------------------------------------


def run_record(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """The run's row of ``runs`` (status, rows loaded, detail, GPU, …); empty when it was never loaded."""
    p = w.p
    return w.query(f"SELECT * FROM runs WHERE dag_id = {p} AND run_id = {p}", [dag_id, run_id])


def run_gpu_model(w: Warehouse, dag_id: str, run_id: str) -> str:
    """The GPU model the run measured on (``none`` on a CPU host or for a run never loaded)."""
    found = run_record(w, dag_id, run_id)
    return str(found["gpu_model"].iloc[0]) if len(found) else "none"


def run_rows(
    w: Warehouse,
    kind: ResultKind,
    dag_id: str,
    run_id: str,
    columns: tuple[str, ...] = (),
    limit: int | None = None,
) -> pd.DataFrame:
    """A run's rows of ``kind`` in key order: ``columns`` (default: every column the kind declares); the first
    ``limit`` of them when given."""
    p = w.p
    chosen = ", ".join(columns or kind.column_names)
    bound = f" LIMIT {int(limit)}" if limit is not None else ""
    return w.query(
        f"SELECT {chosen} FROM {kind.table} WHERE dag_id = {p} AND run_id = {p} "
        f"ORDER BY {kindsql.order_sql(kind)}{bound}",
        [dag_id, run_id],
    )


def run_row_count(w: Warehouse, kind: ResultKind, dag_id: str, run_id: str) -> int:
    """How many rows of ``kind`` a run has."""
    p = w.p
    frame = w.query(f"SELECT count(*) AS n FROM {kind.table} WHERE dag_id = {p} AND run_id = {p}", [dag_id, run_id])
    return int(frame["n"].iloc[0])


def shown_rows(w: Warehouse, kind: ResultKind, dag_id: str, run_id: str, limit: int | None = None) -> pd.DataFrame:
    """The columns of a run that its table shows (``bench run``, the Benchmarks view); its first ``limit`` rows
    in key order when given."""
    return run_rows(w, kind, dag_id, run_id, kind.shown, limit)


# -- campaigns -------------------------------------------------------------------------------------------


def campaigns_with_valid_runs(w: Warehouse, kind: ResultKind) -> list[str]:
    """Campaigns that have a valid run with rows of ``kind``."""
    frame = w.query(f"SELECT DISTINCT campaign FROM {kind.wide_view} ORDER BY campaign")
    return [str(c) for c in frame["campaign"]]


def latest_valid_runs(w: Warehouse, campaign: str | None = None) -> pd.DataFrame:
    """The newest valid run of every campaign (or of one)."""
    columns = "campaign, dag_id, run_id, night, host, gpu_model, run_type, rows_loaded, regressions"
    if campaign is None:
        return w.query(f"SELECT {columns} FROM latest_valid_runs ORDER BY campaign")
    return w.query(f"SELECT {columns} FROM latest_valid_runs WHERE campaign = {w.p}", [campaign])


def run_counts(w: Warehouse) -> pd.DataFrame:
    """Per campaign: runs recorded, how many are valid, the newest start."""
    return w.query(
        "SELECT campaign, count(*) AS runs, sum(CASE WHEN status = 'ok' THEN 1 ELSE 0 END) AS valid, "
        "max(started_at) AS last_started FROM runs GROUP BY campaign ORDER BY campaign"
    )


def findings(w: Warehouse, campaign: str) -> pd.DataFrame:
    """Every regression found in the campaign's runs, with the night it was found."""
    p = w.p
    return w.query(
        "SELECT g.dag_id, g.run_id, r.night, g.case_key, g.metric, g.value, g.baseline_mean, g.relative_change, "
        f"g.z_score FROM regressions g JOIN (SELECT dag_id, run_id, campaign, CAST({RUN_TIME} AS DATE) AS night "
        f"FROM runs) r ON r.dag_id = g.dag_id AND r.run_id = g.run_id WHERE r.campaign = {p} "
        "ORDER BY r.night DESC, g.case_key",
        [campaign],
    )


def regressed_runs(w: Warehouse, campaign: str, metric: str) -> set[str]:
    """Run ids of the campaign where ``metric`` regressed."""
    p = w.p
    frame = w.query(
        "SELECT DISTINCT g.run_id FROM regressions g JOIN runs r ON r.dag_id = g.dag_id AND r.run_id = g.run_id "
        f"WHERE r.campaign = {p} AND g.metric = {p}",
        [campaign, metric],
    )
    return {str(r) for r in frame["run_id"]}


# -- trends and summaries ----------------------------------------------------------------------------------


def trend_history(w: Warehouse, campaign: str, metric: str | None = None) -> pd.DataFrame:
    """Each valid run's mean of every trend metric and case of the campaign (or of one metric), oldest first."""
    p = w.p
    params: list[Any] = [campaign]
    where = f"h.campaign = {p}"
    if metric is not None:
        where += f" AND h.metric = {p}"
        params.append(metric)
    return w.query(
        "SELECT h.case_key, h.metric, h.dag_id, h.run_id, h.night, h.value, h.n, "
        "COALESCE(v.logical_date, v.started_at) AS run_at FROM metric_history h JOIN valid_runs v "
        f"ON v.dag_id = h.dag_id AND v.run_id = h.run_id WHERE {where} ORDER BY run_at, h.run_id",
        params,
    )


def headline_by_case(w: Warehouse, kind: ResultKind, dag_id: str, run_id: str) -> pd.DataFrame:
    """The kind's headline metric of a run, its mean over the repeats (warm-ups left out), per case."""
    p = w.p
    columns = ", ".join(kind.case)
    return w.query(
        f"SELECT {columns}, AVG({kind.headline}) AS value FROM {kind.wide_view} WHERE dag_id = {p} AND run_id = {p} "
        f"AND {kind.headline} IS NOT NULL AND {kindsql.measured_sql(kind)} GROUP BY {columns} ORDER BY {columns}",
        [dag_id, run_id],
    )


def run_means(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """A run's mean of every case and trend metric (``metric_history``), with its campaign, GPU and time."""
    p = w.p
    return w.query(
        "SELECT h.case_key, h.metric, h.value, h.n, r.gpu_model, r.campaign, "
        f"COALESCE(r.logical_date, r.started_at) AS t FROM metric_history h "
        f"JOIN runs r ON r.dag_id = h.dag_id AND r.run_id = h.run_id WHERE h.dag_id = {p} AND h.run_id = {p}",
        [dag_id, run_id],
    )


def baseline_means(
    w: Warehouse, campaign: str, gpu_model: str, run_id: str, before: Any, lookback: int
) -> pd.DataFrame:
    """The means of the ``lookback`` newest valid scheduled runs before ``before`` of the campaign on this GPU
    model, per case and metric (the run itself left out)."""
    p = w.p
    return w.query(
        "SELECT case_key, metric, value, run_id FROM ("
        "  SELECT h.case_key, h.metric, h.value, h.run_id, ROW_NUMBER() OVER ("
        "    PARTITION BY h.case_key, h.metric ORDER BY COALESCE(r.logical_date, r.started_at) DESC) AS back"
        "  FROM metric_history h JOIN runs r ON r.dag_id = h.dag_id AND r.run_id = h.run_id"
        f"  WHERE h.campaign = {p} AND h.run_type = 'scheduled' AND h.gpu_model = {p} AND h.run_id <> {p}"
        f"    AND COALESCE(r.logical_date, r.started_at) < {p}"
        f") recent WHERE back <= {p}",
        [campaign, gpu_model, run_id, before, lookback],
    )


def campaign_samples(w: Warehouse, campaign: str, gpu_model: str) -> pd.DataFrame:
    """Every repeat of every trend metric of the campaign's valid runs on this GPU model."""
    p = w.p
    return w.query(
        f"SELECT case_key, metric, run_id, value FROM metric_samples WHERE campaign = {p} AND gpu_model = {p} "
        "AND validity = 'ok'",
        [campaign, gpu_model],
    )


def run_samples(
    w: Warehouse, campaign: str, run_id: str, config: str | None = None, include_noisy: bool = False
) -> pd.DataFrame:
    """Every repeat of a run's trend metrics per point (optionally of one configuration): its ``ok`` rows, or
    every row with its validity when ``include_noisy``."""
    p = w.p
    sql = f"SELECT config, point, metric, value, validity FROM metric_samples WHERE campaign = {p} AND run_id = {p}"
    sql += "" if include_noisy else " AND validity = 'ok'"
    params = [campaign, run_id]
    if config is not None:
        sql += f" AND config = {p}"
        params.append(config)
    return w.query(sql, params)


def valid_runs_of(w: Warehouse, campaign: str, night: str | None = None) -> pd.DataFrame:
    """The campaign's valid runs (of one night, ``YYYY-MM-DD``), newest first."""
    p = w.p
    where, params = f"campaign = {p}", [campaign]
    if night is not None:
        where += f" AND CAST(night AS TEXT) = {p}"
        params.append(night)
    return w.query(
        f"SELECT run_id, night, run_type, {RUN_TIME} AS run_at FROM valid_runs WHERE {where} ORDER BY {RUN_TIME} DESC",
        params,
    )
