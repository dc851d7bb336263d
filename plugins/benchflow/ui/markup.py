"""The HTML pieces the Benchmarks view's pages share (:mod:`benchflow.ui.pages`, :mod:`benchflow.ui.search_pages`,
:mod:`benchflow.ui.charts_pages`): a frame as a table, the link to a search's page and to a DAG run's page in
Airflow."""

from __future__ import annotations

import math
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from benchflow.ui.charts import number

if TYPE_CHECKING:
    import pandas as pd


def dag_id_of(campaign: str) -> str:
    """The DAG a campaign's spec builds (``bench_<name>``)."""
    return f"bench_{campaign}"


def search_href(dag_id: str, run_id: str, prefix: str = "") -> str:
    """A search's page in the Benchmarks view, whatever its strategy (:mod:`benchflow.ui.search_pages`)."""
    return f"{prefix}search/{quote(str(dag_id), safe='')}/{quote(str(run_id), safe='')}"


def run_href(dag_id: str, run_id: str) -> str:
    """The DAG run's page in the Airflow UI (the view is an iframe: links open in the top window)."""
    return f"/dags/{quote(str(dag_id), safe='')}/runs/{quote(str(run_id), safe='')}"


def _cell(value: Any) -> tuple[str, str]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "", ""
    if isinstance(value, bool):
        return str(value).lower(), "text"
    if isinstance(value, int | float):
        return number(float(value)), ""
    try:
        import numpy as np

        if isinstance(value, np.integer | np.floating):
            return number(float(value)), ""
    except ImportError:  # pragma: no cover
        pass
    return escape(str(value)), "text"


def table(frame: pd.DataFrame, links: dict[str, Any] | None = None, total: int | None = None) -> str:
    """The frame as a table; ``total``: how many rows there are in all, when the frame holds the first few."""
    if not len(frame):
        return '<p class="empty">(no rows)</p>'
    head = "".join(f"<th>{escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = []
        for column, value in zip(frame.columns, record, strict=True):
            text, css = _cell(value)
            if links and column in links and text:
                text = f'<a href="{escape(links[column](record))}" target="_top">{text}</a>'
            cells.append(f'<td class="{css}">{text}</td>' if css else f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    shown = ""
    if total is not None and total > len(frame):
        shown = f'<p class="muted showing">showing {len(frame)} of {total} rows</p>'
    return f"{shown}<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
