"""Every read the project makes of the warehouse, one named function each: what the Benchmarks view, the
analyses (regressions, comparisons, plots), ``bench run`` and the pipeline ask. Each takes a
:class:`~benchflow.warehouse.Warehouse` and plain values, and returns a DataFrame (or a value); none writes.

Placeholders are the backend's (``w.p``); table and column names come from the kinds' declarations, never from
a caller's text. A new question for the UI is one function here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchflow import kinds
from benchflow.warehouse import kindsql
from benchflow.warehouse.kindsql import side_validity_sql

if TYPE_CHECKING:
    import pandas as pd

    from benchflow.kinds import ResultKind, SideTable, Trend
    from benchflow.warehouse import Warehouse

RUN_TIME = "COALESCE(logical_date, started_at)"  # when a run counts as having run: its logical date, else its start
TREND_RUNS = 90  # a trend reads the newest this many valid runs of a campaign (a page stays bounded)
CASES = 2000  # the most cases a run's headline comparison reads
TREND_CASES = 500  # the most cases a trend reads


# -- one run ---------------------------------------------------------------------------------------------


def run_record(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """The run's row of ``runs`` (status, rows loaded, detail, GPU, …); empty when it was never loaded."""
    p = w.p
    return w.query(f"SELECT * FROM runs WHERE dag_id = {p} AND run_id = {p}", [dag_id, run_id])


def run_gpu_model(w: Warehouse, dag_id: str, run_id: str) -> str:
    """The GPU model the run measured on (``none`` on a CPU host or for a run never loaded)."""
    found = run_record(w, dag_id, run_id)
    return str(found["gpu_model"].iloc[0]) if len(found) else "none"


def validity_counts(w: Warehouse, kind: ResultKind, dag_id: str, run_id: str) -> pd.DataFrame:
    """A run's rows that were not measured ``ok`` (``kind.validity``), by validity and reason: ``validity``,
    ``reason``, ``n``, most rows first (empty for a kind without a validity column)."""
    if not kind.validity:
        return w.query("SELECT 1 AS n WHERE 1 = 0")
    p, column = w.p, kind.validity
    return w.query(
        f"SELECT {column} AS validity, COALESCE({column}_reason, '') AS reason, COUNT(*) AS n FROM {kind.table} "
        f"WHERE dag_id = {p} AND run_id = {p} AND COALESCE({column}, 'ok') <> 'ok' "
        f"GROUP BY {column}, COALESCE({column}_reason, '') ORDER BY n DESC, validity, reason LIMIT 20",
        [dag_id, run_id],
    )


def run_rows(
    w: Warehouse,
    kind: ResultKind,
    dag_id: str,
    run_id: str,
    columns: tuple[str, ...] = (),
    limit: int | None = None,
) -> pd.DataFrame:
    """A run's rows of ``kind`` in key order: ``columns`` (default: every column the kind declares); the first
    ``limit`` when given."""
    p = w.p
    chosen = ", ".join(columns or kind.column_names)
    params: list[Any] = [dag_id, run_id]
    sql = f"SELECT {chosen} FROM {kind.table} WHERE dag_id = {p} AND run_id = {p} ORDER BY {kindsql.order_sql(kind)}"
    if limit is not None:
        sql += f" LIMIT {p}"
        params.append(int(limit))
    return w.query(sql, params)


def run_row_count(w: Warehouse, kind: ResultKind, dag_id: str, run_id: str) -> int:
    """How many rows of ``kind`` a run has."""
    p = w.p
    frame = w.query(f"SELECT count(*) AS n FROM {kind.table} WHERE dag_id = {p} AND run_id = {p}", [dag_id, run_id])
    return int(frame["n"].iloc[0]) if len(frame) else 0


def run_validity(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """How many of a run's rows have each validity (``ok``, ``noisy``, ``contended``, …), counted on one of
    its trend metrics (each row carries each metric once)."""
    p = w.p
    return w.query(
        f"SELECT validity, COUNT(*) AS n FROM metric_samples s WHERE s.dag_id = {p} AND s.run_id = {p} AND s.metric = "
        f"(SELECT MIN(metric) FROM metric_samples m WHERE m.dag_id = {p} AND m.run_id = {p}) "
        "GROUP BY validity ORDER BY validity",
        [dag_id, run_id, dag_id, run_id],
    )


def shown_rows(w: Warehouse, kind: ResultKind, dag_id: str, run_id: str, limit: int | None = None) -> pd.DataFrame:
    """The columns of a run that its table shows (``bench run``, the Benchmarks view): its first ``limit``."""
    return run_rows(w, kind, dag_id, run_id, kind.shown, limit)


# -- campaigns -------------------------------------------------------------------------------------------


def campaigns_with_valid_runs(w: Warehouse, kind: ResultKind) -> list[str]:
    """Campaigns whose latest valid run (finished, with rows judged ok) has rows of ``kind``."""
    frame = w.query(
        f"SELECT DISTINCT v.campaign FROM latest_valid_runs v WHERE EXISTS (SELECT 1 FROM {kind.table} t "
        "WHERE t.dag_id = v.dag_id AND t.run_id = v.run_id) ORDER BY v.campaign"
    )
    return [str(c) for c in frame["campaign"]]


def latest_judged_run(w: Warehouse, campaign: str) -> pd.DataFrame:
    """The campaign's newest run that was judged against its baseline (fine, regressed or suspected drift), or no
    row: what a manual run after it (never judged) must not hide."""
    return w.query(
        "SELECT dag_id, run_id, night, run_type, regressions, verdict, verdict_detail, baseline_runs FROM valid_runs "
        f"WHERE campaign = {w.p} AND verdict IN ('fine', 'regressed', 'suspected drift') "
        f"ORDER BY {RUN_TIME} DESC, run_id DESC LIMIT 1",
        [campaign],
    )


def latest_valid_runs(w: Warehouse, campaign: str | None = None) -> pd.DataFrame:
    """The newest valid run of every campaign (or of one)."""
    columns = (
        "campaign, dag_id, run_id, night, host, gpu_model, run_type, rows_loaded, regressions, verdict, "
        "verdict_detail, baseline_runs"
    )
    if campaign is None:
        return w.query(f"SELECT {columns} FROM latest_valid_runs ORDER BY campaign")
    return w.query(f"SELECT {columns} FROM latest_valid_runs WHERE campaign = {w.p}", [campaign])


def campaign_runs(w: Warehouse, campaign: str) -> pd.DataFrame:
    """The campaign's newest run of any status (its dag_id, status, detail and verdict), or no row."""
    p = w.p
    return w.query(
        "SELECT dag_id, run_id, status, detail, run_type, regressions, verdict, verdict_detail, baseline_runs, "
        f"rows_loaded, rows_ok, CAST({RUN_TIME} AS DATE) AS night FROM runs WHERE campaign = {p} "
        f"ORDER BY {RUN_TIME} DESC, run_id DESC "
        "LIMIT 1",
        [campaign],
    )


def run_counts(w: Warehouse) -> pd.DataFrame:
    """Per campaign: runs recorded, how many are valid (finished, with rows judged ok), the newest start."""
    return w.query(
        "SELECT campaign, count(*) AS runs, "
        "sum(CASE WHEN status = 'ok' AND COALESCE(rows_ok, rows_loaded) > 0 THEN 1 ELSE 0 END) AS valid, "
        "max(started_at) AS last_started FROM runs GROUP BY campaign ORDER BY campaign"
    )


def findings(w: Warehouse, campaign: str, limit: int | None = None) -> pd.DataFrame:
    """Every regression found in the campaign's runs (the newest ``limit``), with the night it was found."""
    p = w.p
    params: list[Any] = [campaign]
    sql = (
        "SELECT g.dag_id, g.run_id, r.night, g.case_key, g.metric, g.value, g.baseline_mean, g.relative_change, "
        "g.ci_low, g.ci_high, g.z_score FROM regressions g "
        f"JOIN (SELECT dag_id, run_id, campaign, CAST({RUN_TIME} AS DATE) AS night FROM runs) r "
        f"ON r.dag_id = g.dag_id AND r.run_id = g.run_id WHERE r.campaign = {p} "
        "ORDER BY r.night DESC, g.case_key, g.metric"
    )
    if limit is not None:
        sql += f" LIMIT {p}"
        params.append(int(limit))
    return w.query(sql, params)


def finding_count(w: Warehouse, campaign: str) -> int:
    """How many regressions were found in the campaign's runs."""
    frame = w.query(
        "SELECT count(*) AS n FROM regressions g JOIN runs r ON r.dag_id = g.dag_id AND r.run_id = g.run_id "
        f"WHERE r.campaign = {w.p}",
        [campaign],
    )
    return int(frame["n"].iloc[0]) if len(frame) else 0


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


def trend_history(w: Warehouse, campaign: str, metric: str | None = None, last: int | None = None) -> pd.DataFrame:
    """The mean of every trend metric and case of the campaign (or of one metric) in each of its newest ``last``
    (default ``TREND_RUNS``) valid runs, oldest first (what ``metric_history`` holds, over the ``ok`` repeats): the
    first ``TREND_CASES`` cases (in text order) where there are more. Read from ``metric_samples`` with the runs
    and cases chosen first, so that a campaign of a million cases costs one pass over its samples, not their
    summaries."""
    p = w.p
    params: list[Any] = [campaign, int(TREND_RUNS if last is None else last), campaign, int(TREND_CASES), campaign]
    where = f"s.campaign = {p} AND s.validity = 'ok'"
    if metric is not None:
        where += f" AND s.metric = {p}"
        params.append(metric)
    return w.query(
        "SELECT s.case_key, s.metric, s.dag_id, s.run_id, s.night, AVG(s.value) AS value, COUNT(*) AS n, v.run_at "
        f"FROM metric_samples s JOIN (SELECT dag_id, run_id, {RUN_TIME} AS run_at FROM valid_runs "
        f"WHERE campaign = {p} ORDER BY {RUN_TIME} DESC, run_id DESC LIMIT {p}) v "
        "ON v.dag_id = s.dag_id AND v.run_id = s.run_id "
        f"JOIN (SELECT DISTINCT case_key FROM metric_samples WHERE campaign = {p} ORDER BY case_key LIMIT {p}) c "
        f"ON c.case_key = s.case_key WHERE {where} "
        "GROUP BY s.case_key, s.metric, s.dag_id, s.run_id, s.night, v.run_at ORDER BY v.run_at, s.run_id",
        params,
    )


def trend_case_count(w: Warehouse, campaign: str) -> int:
    """How many cases the campaign's trends have (a trend reads the first ``TREND_CASES``)."""
    frame = w.query(f"SELECT count(DISTINCT case_key) AS n FROM metric_samples WHERE campaign = {w.p}", [campaign])
    return int(frame["n"].iloc[0]) if len(frame) else 0


def headline_by_case(
    w: Warehouse, kind: ResultKind, dag_id: str, run_id: str, limit: int | None = CASES
) -> pd.DataFrame:
    """The kind's headline metric of a run per case (the first ``limit`` cases): the mean over its repeats judged
    ok (warm-ups left out), ``n`` of them, ``values`` (those repeats, comma-separated, for an interval) and
    ``left_out``, its repeats that were not ok (noisy, throttled, contended): a mean is never of those."""
    p = w.p
    columns = ", ".join(kind.case)
    ok = f"{kindsql.validity_sql(kind)} = 'ok'"
    params: list[Any] = [dag_id, run_id]
    value = f"CASE WHEN {ok} THEN {kind.headline} END"
    sql = (
        f"SELECT {columns}, AVG({value}) AS value, COUNT({value}) AS n, "
        f"STRING_AGG(CAST({value} AS TEXT), ',') AS \"values\", "
        f"SUM(CASE WHEN {ok} THEN 0 ELSE 1 END) AS left_out FROM {kind.wide_view} WHERE dag_id = {p} "
        f"AND run_id = {p} AND {kind.headline} IS NOT NULL AND {kindsql.measured_sql(kind)} "
        f"GROUP BY {columns} ORDER BY {columns}"
    )
    if limit is not None:
        sql += f" LIMIT {p}"
        params.append(int(limit))
    return w.query(sql, params)


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
    w: Warehouse, campaign: str, gpu_model: str, run_id: str, before: Any, lookback: int, since: Any = None
) -> pd.DataFrame:
    """The means of the ``lookback`` newest valid scheduled runs before ``before`` (and from ``since`` on, an
    accepted baseline's first night) of the campaign on this GPU model, per case and metric (the run itself left
    out)."""
    p = w.p
    return w.query(
        "SELECT case_key, metric, value, run_id FROM ("
        "  SELECT h.case_key, h.metric, h.value, h.run_id, ROW_NUMBER() OVER ("
        "    PARTITION BY h.case_key, h.metric ORDER BY COALESCE(r.logical_date, r.started_at) DESC) AS back"
        "  FROM metric_history h JOIN runs r ON r.dag_id = h.dag_id AND r.run_id = h.run_id"
        f"  WHERE h.campaign = {p} AND h.run_type = 'scheduled' AND h.gpu_model = {p} AND h.run_id <> {p}"
        f"    AND COALESCE(r.logical_date, r.started_at) < {p}{_since(p, since)}"
        f") recent WHERE back <= {p}",
        [campaign, gpu_model, run_id, before, *([since] if since is not None else []), lookback],
    )


def _since(p: str, since: Any) -> str:
    return "" if since is None else f" AND COALESCE(r.logical_date, r.started_at) >= {p}"


def nightly_series(
    w: Warehouse, campaign: str, gpu_model: str, until: Any, nights: int, since: Any = None
) -> pd.DataFrame:
    """Each case and metric's nightly means over the ``nights`` newest valid scheduled runs up to ``until`` (that
    run included; from ``since`` on) of the campaign on this GPU model, oldest first, with the payload commit each
    measured."""
    p = w.p
    return w.query(
        "SELECT case_key, metric, night, run_id, value, commit FROM ("
        "  SELECT h.case_key, h.metric, CAST(h.night AS TEXT) AS night, h.run_id, h.value, r.payload_commit AS commit,"
        "    COALESCE(r.logical_date, r.started_at) AS t, ROW_NUMBER() OVER ("
        "    PARTITION BY h.case_key, h.metric ORDER BY COALESCE(r.logical_date, r.started_at) DESC) AS back"
        "  FROM metric_history h JOIN runs r ON r.dag_id = h.dag_id AND r.run_id = h.run_id"
        f"  WHERE h.campaign = {p} AND h.run_type = 'scheduled' AND h.gpu_model = {p}"
        f"    AND COALESCE(r.logical_date, r.started_at) <= {p}{_since(p, since)}"
        f") recent WHERE back <= {p} ORDER BY case_key, metric, t",
        [campaign, gpu_model, until, *([since] if since is not None else []), nights],
    )


def accepted_since(w: Warehouse, campaign: str, gpu_model: str, until: Any) -> Any:
    """The first night of the baseline a person accepted last (up to ``until``) on this GPU model, or None."""
    p = w.p
    found = w.query(
        f"SELECT MAX(night_at) AS since FROM decisions WHERE campaign = {p} AND gpu_model = {p} "
        f"AND decision = 'accept' AND night_at <= {p}",
        [campaign, gpu_model, until],
    )
    since = found["since"].iloc[0] if len(found) else None
    return None if since is None or since != since else since  # NaT: none accepted


def decisions(w: Warehouse, campaign: str, limit: int = 50) -> pd.DataFrame:
    """The decisions people took on the campaign's nights, newest first."""
    p = w.p
    return w.query(
        "SELECT night_at, run_id, verdict, decision, reason, decided_by, decided_at, timed_out FROM decisions "
        f"WHERE campaign = {p} ORDER BY night_at DESC LIMIT {int(limit)}",
        [campaign],
    )


def finding_keys(w: Warehouse, dag_id: str) -> pd.DataFrame:
    """Every (run, case, metric) of a campaign DAG with a regression finding."""
    return w.query(f"SELECT DISTINCT run_id, case_key, metric FROM regressions WHERE dag_id = {w.p}", [dag_id])


def recorded_bisections(w: Warehouse, bisect_run_ids: list[str]) -> set[str]:
    """Of these automatic bisection run ids, those an earlier night already started."""
    if not bisect_run_ids:
        return set()
    p = w.p
    marks = ", ".join([p] * len(bisect_run_ids))
    found = w.query(
        f"SELECT DISTINCT bisect_run_id FROM auto_bisections WHERE started AND bisect_run_id IN ({marks})",
        bisect_run_ids,
    )
    return {str(r) for r in found["bisect_run_id"]}


def auto_bisections(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """The bisections a night's findings and change points asked for, and the ``bench_bisect`` run each links to
    (``started``: this night triggered it)."""
    p = w.p
    return w.query(
        f"SELECT * FROM auto_bisections WHERE dag_id = {p} AND run_id = {p} ORDER BY relative_change DESC, case_key",
        [dag_id, run_id],
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


def brackets(
    w: Warehouse, side: SideTable, trend: Trend, campaign: str, run_id: str, config: str | None = None
) -> list[tuple[float, float | None]]:
    """A run's values of a bracketed trend (``Trend.bracket``) with their other bound, one per case of the side
    table (of one configuration): ``[(16.0, 17.0)]``, the bound None where the search found none."""
    assert trend.bracket is not None
    p = w.p
    sql = (
        f"SELECT t.{trend.column} AS value, t.{trend.bracket} AS bound FROM {side.table} t JOIN valid_runs v "
        f"ON v.dag_id = t.dag_id AND v.run_id = t.run_id WHERE v.campaign = {p} AND t.run_id = {p} "
        f"AND t.{trend.column} IS NOT NULL"
    )
    params: list[Any] = [campaign, run_id]
    if config is not None and side.case:
        sql += f" AND t.{side.case[0]} = {p}"
        params.append(config)
    frame = w.query(sql, params)
    return [
        (float(value), None if bound is None or bound != bound else float(bound))
        for value, bound in zip(frame["value"], frame["bound"], strict=True)
    ]


def point_settings(
    w: Warehouse, kind: ResultKind, campaign: str, run_id: str, columns: tuple[str, ...], config: str | None = None
) -> pd.DataFrame:
    """The distinct ``columns`` (run settings such as a phase's prompt count) of each point of a run's measured
    rows (of one configuration): what ``bench compare`` checks both sides ran alike."""
    p = w.p
    chosen = ", ".join(kind.column(c).name for c in columns)
    sql = (
        f"SELECT DISTINCT {kindsql.point_sql(kind)} AS point, {chosen} FROM {kind.wide_view} "
        f"WHERE campaign = {p} AND run_id = {p} AND {kindsql.measured_sql(kind)}"
    )
    params = [campaign, run_id]
    if config is not None:
        sql += f" AND {kindsql.group_sql(kind)} = {p}"
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


# -- the Benchmarks view's charts --------------------------------------------------------------------------


def trend_intervals(w: Warehouse, campaign: str, last: int | None = None) -> pd.DataFrame:
    """Each of the newest ``last`` (default ``TREND_RUNS``, read when called) valid runs' mean of every trend
    metric and case of the campaign (the first ``TREND_CASES`` cases in text order, as :func:`trend_history`) with
    its 95 % interval over the run's ``ok`` repeats (``case_summary``) and when the run ran, oldest first."""
    p = w.p
    return w.query(
        "SELECT s.case_key, s.metric, s.dag_id, s.run_id, s.night, s.n, s.mean AS value, s.ci_low, s.ci_high, "
        f"v.run_at FROM case_summary s JOIN (SELECT dag_id, run_id, {RUN_TIME} AS run_at FROM valid_runs "
        f"WHERE campaign = {p} ORDER BY {RUN_TIME} DESC, run_id DESC LIMIT {p}) v "
        "ON v.dag_id = s.dag_id AND v.run_id = s.run_id "
        f"JOIN (SELECT DISTINCT case_key FROM metric_samples WHERE campaign = {p} ORDER BY case_key LIMIT {p}) c "
        f"ON c.case_key = s.case_key WHERE s.campaign = {p} ORDER BY v.run_at, s.run_id",
        [campaign, int(TREND_RUNS if last is None else last), campaign, int(TREND_CASES), campaign],
    )


def case_values(w: Warehouse, kind: ResultKind, dag_id: str, run_id: str, metric: str) -> pd.DataFrame:
    """Every measured repeat of ``metric`` in a run (warm-ups left out) of its first ``CASES`` cases (read when
    called, as :func:`headline_by_case`): its case columns, ``repeat``, ``value`` and ``validity`` (rows that are
    not ``ok`` are kept, for a chart to show them apart)."""
    p = w.p
    columns = ", ".join(kind.case)
    ours = ", ".join(f"t.{c}" for c in kind.case)
    same = " AND ".join(f"t.{c} IS NOT DISTINCT FROM c.{c}" for c in kind.case)
    rows = f"{metric} IS NOT NULL AND {kindsql.measured_sql(kind)}"
    return w.query(
        f"SELECT {ours}, {kindsql.repeat_sql(kind)} AS repeat, CAST({metric} AS DOUBLE PRECISION) AS value, "
        f"{kindsql.validity_sql(kind)} AS validity FROM {kind.wide_view} t "
        f"JOIN (SELECT DISTINCT {columns} FROM {kind.wide_view} WHERE dag_id = {p} AND run_id = {p} AND {rows} "
        f"ORDER BY {columns} LIMIT {p}) c ON {same} WHERE t.dag_id = {p} AND t.run_id = {p} AND {rows} "
        f"ORDER BY {ours}",
        [dag_id, run_id, int(CASES), dag_id, run_id],
    )


def measure_values(w: Warehouse, kind: ResultKind, dag_id: str, run_id: str) -> pd.DataFrame:
    """A run's rows of a kind that holds one named measurement a row (``kind.measures``): ``metric``, ``case``,
    ``unit``, ``value``, in output order."""
    assert kind.measures is not None
    m, p = kind.measures, w.p
    return w.query(
        f"SELECT {m.name} AS metric, COALESCE({m.case}, '') AS case_key, COALESCE({m.unit}, '') AS unit, "
        f"CAST({m.value} AS DOUBLE PRECISION) AS value FROM {kind.wide_view} WHERE dag_id = {p} AND run_id = {p} "
        f"AND {m.value} IS NOT NULL ORDER BY {kindsql.order_sql(kind)}",
        [dag_id, run_id],
    )


def measure_history(w: Warehouse, kind: ResultKind, campaign: str) -> pd.DataFrame:
    """Per valid run of the campaign, metric and case (``kind.measures``): the values' count, mean and sample
    standard deviation, with when the run ran, oldest first; bounded as :func:`trend_intervals`: the newest
    ``TREND_RUNS`` valid runs and the first ``TREND_CASES`` cases (in text order)."""
    assert kind.measures is not None
    m, p = kind.measures, w.p
    case = f"COALESCE(g.{m.case}, '')"
    return w.query(
        f"SELECT g.dag_id, g.run_id, g.night, v.run_at, g.{m.name} AS metric, {case} AS case_key, "
        f"MIN(COALESCE(g.{m.unit}, '')) AS unit, COUNT(*) AS n, AVG(g.{m.value}) AS value, "
        f"STDDEV_SAMP(g.{m.value}) AS std FROM {kind.wide_view} g "
        f"JOIN (SELECT dag_id, run_id, {RUN_TIME} AS run_at FROM valid_runs WHERE campaign = {p} "
        f"ORDER BY {RUN_TIME} DESC, run_id DESC LIMIT {p}) v ON v.dag_id = g.dag_id AND v.run_id = g.run_id "
        f"JOIN (SELECT DISTINCT COALESCE({m.case}, '') AS case_key FROM {kind.wide_view} WHERE campaign = {p} "
        f"ORDER BY case_key LIMIT {p}) c ON c.case_key = {case} "
        f"WHERE g.campaign = {p} AND g.{m.value} IS NOT NULL "
        f"GROUP BY g.dag_id, g.run_id, g.night, v.run_at, g.{m.name}, {case} ORDER BY v.run_at, g.run_id",
        [campaign, int(TREND_RUNS), campaign, int(TREND_CASES), campaign],
    )


def search_results(w: Warehouse, side: SideTable, dag_id: str, run_id: str) -> pd.DataFrame:
    """A run's load searches (``side``: a kind's table of role load_search), one row per config: the SLO and the
    trail as JSON text, and the answer's validity (ok only when every probe of the config was)."""

    p = w.p
    validity = side_validity_sql(kinds.owner(side), side, side.table)
    return w.query(
        "SELECT config, over, range_low, range_high, slo, confidence, precision, reason, pass_load, fail_load, "
        f"fail_verdict, probes, loads, seconds, goodput_rps, trail, {validity} AS validity FROM {side.table} "
        f"WHERE dag_id = {p} AND run_id = {p} ORDER BY config",
        [dag_id, run_id],
    )


def bottlenecks(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """A run's bottleneck verdicts (``phase_bottlenecks``), one per phase, in phase order (warm-ups left out)."""
    p = w.p
    return w.query(
        "SELECT kind, config, concurrency, request_rate, repeat, dtype, m, phase_start, phase_end, verdict, limiter, "
        "says, "
        f"evidence FROM phase_bottlenecks WHERE dag_id = {p} AND run_id = {p} AND (warmup IS NULL OR NOT warmup) "
        "ORDER BY phase_start, config, concurrency, request_rate, m, repeat",
        [dag_id, run_id],
    )


def server_timeline(w: Warehouse, dag_id: str, run_id: str, buckets: int = 400) -> pd.DataFrame:
    """A run's server gauges (``server_samples``) per config, role and server in at most ``buckets`` time buckets:
    the bucket's first time (epoch s), mean requests running and queued, and the largest KV-cache usage."""
    p = w.p
    return w.query(
        "SELECT s.config, s.role, s.server, MIN(s.t) AS t, AVG(s.running) AS running, AVG(s.queued) AS queued, "
        "MAX(s.kv_usage) AS kv_usage FROM server_samples s CROSS JOIN ("
        f"SELECT MIN(t) AS t0, MAX(t) AS t1 FROM server_samples WHERE dag_id = {p} AND run_id = {p}) b "
        f"WHERE s.dag_id = {p} AND s.run_id = {p} GROUP BY s.config, s.role, s.server, "
        f"FLOOR((s.t - b.t0) / ((b.t1 - b.t0 + 1e-9) / {int(buckets)})) ORDER BY t",
        [dag_id, run_id, dag_id, run_id],
    )


def telemetry_phases(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """A run's phases per GPU (``telemetry_phase_gpus``): the phase's key, start and end (epoch s), the GPU, the
    server holding it, and whether it throttled, in time order."""
    p = w.p
    return w.query(
        "SELECT config, concurrency, request_rate, repeat, warmup, dtype, m, phase_start, phase_end, gpu_index, uuid, "
        "server, throttled, throttle_reasons FROM telemetry_phase_gpus "
        f"WHERE dag_id = {p} AND run_id = {p} ORDER BY phase_start, gpu_index",
        [dag_id, run_id],
    )


def telemetry_timeline(w: Warehouse, dag_id: str, run_id: str, buckets: int = 800) -> pd.DataFrame:
    """A run's GPU samples (``telemetry_samples``) per GPU in at most ``buckets`` time buckets over the run: the
    bucket's first time (epoch s), its mean power, GPU utilisation and SM clock, and the samples it holds."""
    p = w.p
    return w.query(
        "SELECT s.index AS gpu_index, MIN(s.t) AS t, AVG(s.power_w) AS power_w, AVG(s.util_gpu_pct) AS util_gpu_pct, "
        "AVG(s.sm_mhz) AS sm_mhz, COUNT(*) AS samples FROM telemetry_samples s CROSS JOIN ("
        f"SELECT MIN(t) AS t0, MAX(t) AS t1 FROM telemetry_samples WHERE dag_id = {p} AND run_id = {p}) b "
        f"WHERE s.dag_id = {p} AND s.run_id = {p} AND s.t IS NOT NULL "
        f"GROUP BY s.index, FLOOR((s.t - b.t0) * {int(buckets)} / CASE WHEN b.t1 > b.t0 THEN b.t1 - b.t0 ELSE 1 END) "
        "ORDER BY s.index, t",
        [dag_id, run_id, dag_id, run_id],
    )


# -- bisections ------------------------------------------------------------------------------------------


def commit_samples(
    w: Warehouse, campaign: str, case_key: str, metric: str, gpu_model: str, commits: list[str]
) -> pd.DataFrame:
    """Every ``ok`` value of one case and metric measured by the campaign's valid runs of these payload commits
    on this GPU model (what a bisection may reuse), oldest run first: payload_commit, run_id, value, and the run's
    trigger conf and spec hash (what it measured)."""
    import pandas as pd

    if not commits:
        return pd.DataFrame(columns=["payload_commit", "run_id", "value", "conf", "spec_hash"])
    p = w.p
    marks = ", ".join([p] * len(commits))
    return w.query(
        "SELECT r.payload_commit, s.run_id, s.value, r.conf, r.spec_hash FROM metric_samples s JOIN runs r "
        "ON r.dag_id = s.dag_id AND r.run_id = s.run_id "
        f"WHERE s.campaign = {p} AND s.case_key = {p} AND s.metric = {p} AND s.gpu_model = {p} "
        f"AND s.validity = 'ok' AND r.payload_commit IN ({marks}) "
        "ORDER BY COALESCE(r.logical_date, r.started_at), s.run_id, s.repeat",
        [campaign, case_key, metric, gpu_model, *commits],
    )


def probe_samples(w: Warehouse, dag_id: str, run_id: str, case_key: str, metric: str) -> pd.DataFrame:
    """One probe run's ``ok`` values of its case and metric, with the commit the run shipped (none when the run
    is not valid: its rows never reach ``metric_samples``)."""
    p = w.p
    return w.query(
        "SELECT r.payload_commit, s.value FROM metric_samples s JOIN runs r "
        "ON r.dag_id = s.dag_id AND r.run_id = s.run_id "
        f"WHERE s.dag_id = {p} AND s.run_id = {p} AND s.case_key = {p} AND s.metric = {p} AND s.validity = 'ok' "
        "ORDER BY s.repeat",
        [dag_id, run_id, case_key, metric],
    )


def bisections(w: Warehouse, campaign: str | None = None) -> pd.DataFrame:
    """Every bisection (of one campaign), newest first."""
    columns = (
        "dag_id, run_id, campaign, case_key, metric, good, bad, status, first_bad, parent, ratio, ratio_low, "
        "ratio_high, range_good, range_bad, suspects, probes, reused, rounds, summary, started_at, updated_at"
    )
    return _newest_first(w, "bisections", columns, campaign)


def bisection(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """One bisection's row, its whole result (JSON) included."""
    p = w.p
    return w.query(f"SELECT * FROM bisections WHERE dag_id = {p} AND run_id = {p}", [dag_id, run_id])


def bisection_probes(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """A bisection's probe chain, oldest commit first."""
    p = w.p
    return w.query(
        f"SELECT * FROM bisection_probes WHERE dag_id = {p} AND run_id = {p} ORDER BY position", [dag_id, run_id]
    )


def finding_commits(w: Warehouse, campaign: str) -> pd.DataFrame:
    """Per regressed run of the campaign: the payload commit it shipped (``bad``) and that of the newest valid
    run before it with another commit (``good``): what a bisection of the finding starts from."""
    p = w.p
    return w.query(
        "SELECT g.run_id, r.payload_commit AS bad, ("
        "  SELECT v.payload_commit FROM runs v WHERE v.campaign = r.campaign AND v.status = 'ok'"
        "  AND v.payload_commit IS NOT NULL AND v.payload_commit <> r.payload_commit"
        "  AND COALESCE(v.logical_date, v.started_at) < COALESCE(r.logical_date, r.started_at)"
        "  ORDER BY COALESCE(v.logical_date, v.started_at) DESC LIMIT 1) AS good "
        "FROM (SELECT DISTINCT dag_id, run_id FROM regressions) g "
        f"JOIN runs r ON r.dag_id = g.dag_id AND r.run_id = g.run_id WHERE r.campaign = {p} "
        "AND r.payload_commit IS NOT NULL",
        [campaign],
    )


def auto_bisection_links(w: Warehouse, campaign: str) -> pd.DataFrame:
    """Per finding of the campaign that an automatic bisection covers: the ``bench_bisect`` run it links to."""
    return w.query(
        "SELECT a.run_id, a.case_key, a.metric, a.bisect_run_id FROM auto_bisections a "
        "JOIN runs r ON r.dag_id = a.dag_id AND r.run_id = a.run_id "
        f"WHERE r.campaign = {w.p} AND a.reason = 'regression' AND a.bisect_run_id <> ''",
        [campaign],
    )


def pass_load_rows(w: Warehouse, table: str, dag_id: str, run_id: str) -> pd.DataFrame:
    """A run's measured (not warm-up) serving rows with what a config search reads at each config's pass load:
    output tokens/s, mean TPOT, J/token and validity."""
    p = w.p
    return w.query(
        "SELECT config, concurrency, request_rate, repeat, output_throughput, mean_tpot_ms, j_per_token, validity "
        f"FROM {table} WHERE dag_id = {p} AND run_id = {p} AND (warmup IS NULL OR NOT warmup) "
        "ORDER BY config, concurrency, request_rate, repeat",
        [dag_id, run_id],
    )


def config_searches(w: Warehouse, campaign: str | None = None) -> pd.DataFrame:
    """Every config search (of one campaign), newest first."""
    columns = (
        "dag_id, run_id, campaign, campaign_dag_id, status, best, configs, excluded, rounds, probes, search_probes, "
        "prompts, grid_probes, grid_prompts, reused, summary, started_at, updated_at"
    )
    return _newest_first(w, "config_searches", columns, campaign)


def config_search(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """One config search's row, its whole answer (JSON) and the winner's config block included."""
    p = w.p
    return w.query(f"SELECT * FROM config_searches WHERE dag_id = {p} AND run_id = {p}", [dag_id, run_id])


def config_search_configs(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """A config search's ranking: every config of the space, best first."""
    p = w.p
    return w.query(
        f"SELECT * FROM config_search_configs WHERE dag_id = {p} AND run_id = {p} ORDER BY rank", [dag_id, run_id]
    )


def reusable_config_measures(w: Warehouse, hashes: list[str]) -> pd.DataFrame:
    """Valid measures of these configs (by config hash) that earlier searches made, newest first: what a search
    may reuse when the payload, GPU model and settings match too."""
    import pandas as pd

    if not hashes:
        return pd.DataFrame()
    p = w.p
    marks = ", ".join([p] * len(hashes))
    return w.query(
        "SELECT c.* FROM config_search_configs c JOIN config_searches s ON s.dag_id = c.dag_id AND s.run_id = c.run_id "
        f"WHERE c.config_hash IN ({marks}) AND c.validity = 'ok' AND c.reused_from IS NULL "
        "AND (c.pass_load IS NOT NULL OR c.fail_load IS NOT NULL) ORDER BY s.updated_at DESC, c.run_id",
        hashes,
    )


def searches(w: Warehouse, campaign: str | None = None) -> pd.DataFrame:
    """Every search of any strategy (of one campaign), newest first."""
    columns = "dag_id, run_id, strategy, campaign, status, best, summary, rounds, probes, hosts_down, started_at"
    return _newest_first(w, "searches", columns, campaign)


def _newest_first(w: Warehouse, table: str, columns: str, campaign: str | None) -> pd.DataFrame:
    """A search table's rows (of one campaign), newest first."""
    where, args = (f" WHERE campaign = {w.p}", [campaign]) if campaign is not None else ("", [])
    return w.query(f"SELECT {columns} FROM {table}{where} ORDER BY started_at DESC", args)


def search(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """One search's row, its whole answer (JSON) included."""
    p = w.p
    return w.query(f"SELECT * FROM searches WHERE dag_id = {p} AND run_id = {p}", [dag_id, run_id])


def search_keys(w: Warehouse, dag_id: str, run_id: str) -> pd.DataFrame:
    """A search's keys in the order of its answer."""
    p = w.p
    return w.query(f"SELECT * FROM search_keys WHERE dag_id = {p} AND run_id = {p} ORDER BY rank", [dag_id, run_id])
