"""The SQL over a result kind, derived from its declarations (:class:`benchflow.kinds.ResultKind`): its wide view,
the text keys of its cases and points, the configuration a row belongs to, the order its rows are shown in.

A case key names every case column with its value, ``config=pd,concurrency=8`` or ``m=64``; a point key leaves
the configuration out (``concurrency=8``), so that configurations can be compared point by point. The kinds' own
tables and the views never hold anything these functions could not derive again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchflow.kinds import ResultKind, SideTable

# What a wide view carries of each run beside the kind's columns.
RUN_COLUMNS = ("campaign", "dag_id", "run_id", "night", "started_at", "logical_date", "host", "gpu_model", "run_type")


def key_text(columns: tuple[str, ...], sparse: tuple[str, ...] = (), floats: tuple[str, ...] = ()) -> str:
    """``'config=' || CAST(config AS TEXT) || ',concurrency=' || CAST(concurrency AS TEXT)``; NULL values read
    as empty text (a case without a key is still one case), except in ``sparse`` columns, which a NULL or an
    infinite value (no limit) leaves out of the key. ``floats`` are written alike on every backend: a whole number
    without its ``.0``."""
    if not columns:
        return "''"
    parts = []
    for i, column in enumerate(columns):
        name = column.split(".")[-1]
        value = f"CAST({column} AS TEXT)"
        if name in floats:
            value = f"CASE WHEN {column} = FLOOR({column}) THEN CAST(CAST({column} AS BIGINT) AS TEXT) ELSE {value} END"
        label = f"'{',' if i else ''}{column}='"
        if name in sparse:  # NULL or infinite (a client's request rate inf: no limit) leaves the column out
            parts.append(f"CASE WHEN {column} IS NULL OR {column} > 1e308 THEN '' ELSE {label} || {value} END")
        else:
            parts.append(f"{label} || COALESCE({value}, '')")
    text = " || ".join(parts)
    # an empty sparse column first leaves the next one's comma leading
    return f"LTRIM({text}, ',')" if columns[0].split(".")[-1] in sparse else text


def case_sql(kind: ResultKind) -> str:
    return key_text(kind.case, kind.sparse, _floats(kind))


def point_sql(kind: ResultKind) -> str:
    return key_text(kind.point, kind.sparse, _floats(kind))


def _floats(kind: ResultKind) -> tuple[str, ...]:
    return tuple(c.name for c in kind.columns if c.type == "float")


def group_sql(kind: ResultKind) -> str:
    return f"CAST({kind.group} AS TEXT)" if kind.group else "CAST(NULL AS TEXT)"


def repeat_sql(kind: ResultKind) -> str:
    return kind.repeat or "1"


def measured_sql(kind: ResultKind) -> str:
    """The rows every statistic uses: all but the warm-ups."""
    return f"NOT COALESCE({kind.warmup}, FALSE)" if kind.warmup else "TRUE"


def order_sql(kind: ResultKind) -> str:
    return ", ".join(kind.key)


def wide_view(kind: ResultKind) -> str:
    """``CREATE VIEW <kind>_wide``: every column of the kind's rows of valid runs, with the run's provenance."""
    run = ", ".join(f"v.{c}" for c in RUN_COLUMNS)
    own = ", ".join(f"t.{c}" for c in kind.column_names)
    return (
        f"CREATE VIEW {kind.wide_view} AS SELECT {run}, {own} FROM {kind.table} t "
        "JOIN valid_runs v ON v.dag_id = t.dag_id AND v.run_id = t.run_id"
    )


def validity_sql(kind: ResultKind) -> str:
    """Whether a row is ``ok`` (or noisy, throttled, contended): rows without the judgement count as ok."""
    return f"COALESCE({kind.validity}, 'ok')" if kind.validity else "'ok'"


def samples_select(kind: ResultKind, metric: str) -> str:
    """One trend metric of a kind as rows of ``metric_samples``: one per repeat of each case of each valid run,
    with the row's validity (the statistics over it take the ``ok`` rows only)."""
    return (
        "SELECT campaign, dag_id, run_id, night, host, gpu_model, run_type, "
        f"{group_sql(kind)} AS config, {point_sql(kind)} AS point, {case_sql(kind)} AS case_key, "
        f"{repeat_sql(kind)} AS repeat, '{metric}' AS metric, CAST({metric} AS DOUBLE PRECISION) AS value, "
        f"{validity_sql(kind)} AS validity FROM {kind.wide_view} WHERE {metric} IS NOT NULL AND {measured_sql(kind)}"
    )


def side_samples_select(kind: ResultKind, side: SideTable, metric: str) -> str:
    """A side table's trend metric (a load search's answer) as rows of ``metric_samples``: one a run and case,
    with the validity of the kind's rows it was measured by (``SideTable.judged_by``)."""
    run = "v.campaign, v.dag_id, v.run_id, v.night, v.host, v.gpu_model, v.run_type"
    group = f"CAST(t.{side.case[0]} AS TEXT)" if side.case else "CAST(NULL AS TEXT)"
    case = key_text(tuple(f"t.{c}" for c in side.case)).replace("'t.", "'")
    return (
        f"SELECT {run}, {group} AS config, '{side.point}' AS point, {case} AS case_key, 1 AS repeat, "
        f"'{metric}' AS metric, CAST(t.{metric} AS DOUBLE PRECISION) AS value, {side_validity_sql(kind, side)} "
        f"AS validity FROM {side.table} t JOIN valid_runs v ON v.dag_id = t.dag_id AND v.run_id = t.run_id "
        f"WHERE t.{metric} IS NOT NULL"
    )


def side_validity_sql(kind: ResultKind, side: SideTable, row: str = "t") -> str:
    """A side row's validity: 'ok' unless one of the kind's rows it was measured by is not (then that one's)."""
    if not side.judged_by or not kind.validity:
        return "'ok'"
    same = " AND ".join(f"r.{c} = {row}.{c}" for c in side.judged_by)
    measured = f" AND NOT COALESCE(r.{kind.warmup}, FALSE)" if kind.warmup else ""
    return (
        f"COALESCE((SELECT MIN(r.{kind.validity}) FROM {kind.table} r WHERE r.dag_id = {row}.dag_id "
        f"AND r.run_id = {row}.run_id AND {same}{measured} AND r.{kind.validity} <> 'ok'), 'ok')"
    )
