"""Plots of one campaign's results, drawn from the warehouse views (matplotlib, PNG files).

* serving: output throughput and mean TTFT against concurrency, one line per config (the run's rows);
* kernel: us/token against M (the run's rows, log-log);
* trend: the campaign's headline metric night by night, regressions marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TREND = {
    "kernel_sweep_wide": ("tok_per_s", "m", "tok/s at the largest M"),
    "serving_wide": ("output_throughput", "concurrency", "output tok/s at the highest concurrency"),
}


def render(warehouse: Any, dag_id: str, run_id: str, out_dir: Path) -> list[Path]:
    """Draw every plot that the run's data allows into ``out_dir``; return the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    run = warehouse.query("SELECT campaign FROM runs WHERE dag_id = ? AND run_id = ?", [dag_id, run_id])
    if not len(run):
        return written
    campaign = str(run["campaign"][0])

    serving = warehouse.query(
        "SELECT config, concurrency, output_throughput, mean_ttft_ms FROM serving_results "
        "WHERE dag_id = ? AND run_id = ? ORDER BY config, concurrency", [dag_id, run_id]
    )  # fmt: skip
    if len(serving):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        for config, rows in serving.groupby("config"):
            left.plot(rows["concurrency"], rows["output_throughput"], marker="o", label=str(config))
            right.plot(rows["concurrency"], rows["mean_ttft_ms"], marker="o", label=str(config))
        left.set(xlabel="concurrency", ylabel="output tok/s", title=f"{campaign}: throughput")
        right.set(xlabel="concurrency", ylabel="mean TTFT (ms)", title=f"{campaign}: time to first token")
        for axis in (left, right):
            axis.grid(alpha=0.3)
            axis.legend()
        written.append(_save(fig, out_dir / "serving_vs_concurrency.png"))

    kernel = warehouse.query(
        "SELECT m, us_per_token FROM kernel_results WHERE dag_id = ? AND run_id = ? ORDER BY m", [dag_id, run_id]
    )
    if len(kernel):
        fig, axis = plt.subplots(figsize=(7, 4))
        axis.loglog(kernel["m"], kernel["us_per_token"], marker="o", base=2)
        axis.set(xlabel="tokens per call (M)", ylabel="us per token", title=f"{campaign}: us/token against M")
        axis.grid(alpha=0.3, which="both")
        written.append(_save(fig, out_dir / "us_per_token_vs_m.png"))

    view = "serving_wide" if len(serving) else "kernel_sweep_wide" if len(kernel) else None
    if view is not None:
        metric, case, label = TREND[view]
        history = warehouse.query(
            f"SELECT w.run_id, w.night, w.{metric} AS value FROM {view} w "
            f"WHERE w.campaign = ? AND w.{case} = (SELECT MAX({case}) FROM {view} WHERE campaign = ?) "
            "ORDER BY w.night", [campaign, campaign]
        )  # fmt: skip
        regressed = warehouse.query(
            "SELECT DISTINCT g.run_id FROM regressions g JOIN runs r ON r.dag_id = g.dag_id "
            "AND r.run_id = g.run_id WHERE r.campaign = ? AND g.metric = ?",
            [campaign, metric],
        )
        flagged = set(regressed["run_id"])
        if len(history):
            fig, axis = plt.subplots(figsize=(9, 4))
            axis.plot(history["night"], history["value"], marker="o", label=label)
            bad = history[history["run_id"].isin(flagged)]
            axis.scatter(bad["night"], bad["value"], s=160, facecolors="none", edgecolors="red", linewidths=2,
                         label="regression", zorder=3)  # fmt: skip
            axis.set(xlabel="night", ylabel=label, title=f"{campaign}: nightly trend")
            axis.grid(alpha=0.3)
            axis.legend()
            fig.autofmt_xdate()
            written.append(_save(fig, out_dir / "nightly_trend.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
