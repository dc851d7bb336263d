"""The fused-MoE kernel's tile tuning as a search strategy: which tile (``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``,
``GROUP_M``, ``num_warps``, ``num_stages``) makes one token count M fastest on the campaign's GPU.

What ``kernels/moe/tune.py`` does on one GPU by hand, as a search over the kernel campaign's own runs: a probe of a
tile is a run of the campaign's DAG with that tile (the benchmark's ``tile`` argument) and only the case ``m=M``,
``repeats`` times, on one host of the pool, so it deploys, leases, times and validates like any campaign run. Its
values are that run's ``ok`` rows of the case and metric.

The algorithm (:class:`TileRace`, pure) is a race: round 1 measures every tile; each later round measures again only
the leader (the best mean) and the tiles that are not worse than it beyond noise (Welch's t on the logs, the 95 %
interval of tile/leader wholly on the worse side), until each of them has ``max_samples`` values or none is left
beside the leader. The answer is the best tile with each other tile's ratio to it and its interval; tiles the
values cannot tell apart from it are named as such, never ranked below it; a tile whose runs gave no valid value
(it does not fit the GPU, its run failed) is ``failed`` with why; and when no tile was measured there is no best.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from benchflow.analysis.stats import compare, summarize
from benchflow.params import ConfError
from benchflow.searches.engine import MAX_HOURS_PARAM, Declared, Probe, Search, StrategyBase, campaign_param, register
from benchflow.searches.rounds import Rounds

if TYPE_CHECKING:
    from benchflow.spec import CampaignSpec
    from benchflow.warehouse import Warehouse

DAG_ID = "bench_tile_search"
MAX_ROUNDS = 6
KNOBS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
TILE = re.compile(
    r"^(BLOCK_M|BLOCK_N|BLOCK_K|GROUP_M|num_warps|num_stages)=\d{1,4}(,(BLOCK_M|BLOCK_N|BLOCK_K|GROUP_M|num_warps|num_stages)=\d{1,4}){0,5}$"
)
Verdict = Literal["best", "not distinguishable from best", "worse", "failed", "not measured"]


def grid(block_m: list[int], block_n: list[int], block_k: list[int]) -> list[str]:
    """Every tile of these block sizes (one group, 4 warps, 3 stages), as the benchmark's ``--tile`` reads it."""
    return [
        f"BLOCK_M={m},BLOCK_N={n},BLOCK_K={k},GROUP_M=1,num_warps=4,num_stages=3"
        for m, n, k in itertools.product(block_m, block_n, block_k)
    ]


DEFAULT_TILES = grid([16, 32, 64], [32, 64, 128], [64, 128])


def short(tile: str) -> str:
    """A tile in a few characters (``bm32_bn64_bk128_g1_w4_s3``): its probe runs' ids."""
    values = dict(part.split("=") for part in tile.split(","))
    keys = {"BLOCK_M": "bm", "BLOCK_N": "bn", "BLOCK_K": "bk", "GROUP_M": "g", "num_warps": "w", "num_stages": "s"}
    return "_".join(f"{keys[k]}{values[k]}" for k in KNOBS if k in values)


# -- the algorithm -------------------------------------------------------------------------------------------


@dataclass
class TileRace(Rounds):
    """The race's whole state, JSON-able (:meth:`to_json`)."""

    tiles: list[str]
    better: Literal["higher", "lower"] = "lower"
    repeats: int = 3
    max_samples: int = 12
    max_probes: int = 60
    max_seconds: float = 6 * 3600.0
    samples: dict[str, list[float]] = field(default_factory=dict)

    def _measured(self) -> list[str]:
        return [t for t in self.tiles if t not in self.failed and len(self.samples.get(t, [])) >= 2]

    def leader(self) -> str | None:
        measured = self._measured()
        if not measured:
            return None
        sign = 1 if self.better == "lower" else -1
        return min(measured, key=lambda t: (sign * summarize(self.samples[t]).mean, self.tiles.index(t)))

    def ratio(self, tile: str) -> tuple[float, float, float] | None:
        """tile / leader with its 95 % interval (None: the leader itself, or too few values)."""
        lead = self.leader()
        if lead is None or tile == lead or tile not in self._measured():
            return None
        found = compare(self.samples[lead], self.samples[tile], self.better)
        return found.ratio, found.ratio_low, found.ratio_high

    def verdict(self, tile: str) -> Verdict:
        if tile in self.failed:
            return "failed"
        if tile not in self._measured():
            return "not measured"
        if tile == self.leader():
            return "best"
        _, low, high = self.ratio(tile)  # type: ignore[misc]
        worse = low > 1 if self.better == "lower" else high < 1
        return "worse" if worse else "not distinguishable from best"

    def contenders(self) -> list[str]:
        """The leader and every tile its values cannot tell apart from it."""
        return [t for t in self._measured() if self.verdict(t) in ("best", "not distinguishable from best")]

    def _open(self) -> list[str]:
        """Contenders that more values may still separate: more than the leader alone, each short of the limit."""
        contenders = self.contenders()
        if len(contenders) < 2:
            return []
        return [t for t in contenders if len(self.samples[t]) < self.max_samples]

    def status(self) -> str:
        """running | done | budget | failed (no tile measured)."""
        if self.outstanding:
            return "running"
        unmeasured = [t for t in self.tiles if t not in self.failed and t not in self.samples]
        if not self.stopped and (unmeasured or self._open()):
            return "running"
        if self.leader() is None:
            return "failed"
        return "budget" if self.stopped else "done"

    def next_round(self, now: float | None = None) -> list[str]:
        now = self._now(now)
        if self.status() != "running":
            return []
        picks = [t for t in self.tiles if t not in self.failed and t not in self.samples] or self._open()
        if self._elapsed(now) >= self.max_seconds:
            self.stopped = f"budget spent (seconds: {self.max_seconds:.0f} s passed)"
            return []
        picks = picks[: max(0, self.max_probes - self.probes)]
        if not picks:
            self.stopped = f"budget spent (probes: {self.max_probes} used)"
            return []
        self._begin(picks)
        return picks

    def record(self, tile: str, values: list[float], why: str = "") -> None:
        self._end(tile)
        good = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
        if good:
            self.samples.setdefault(tile, []).extend(good)
        elif tile not in self.samples:
            self.failed[tile] = why or "the probe gave no valid values"

    def ranking(self) -> list[dict[str, Any]]:
        rows = []
        for tile in self.tiles:
            values = self.samples.get(tile, [])
            summary = summarize(values) if values else None
            ratio = self.ratio(tile)
            rows.append(
                {
                    "tile": tile,
                    "verdict": self.verdict(tile),
                    "n": len(values),
                    "mean": summary.mean if summary else None,
                    "low": summary.ci_low if summary else None,
                    "high": summary.ci_high if summary else None,
                    "ratio": ratio[0] if ratio else None,
                    "ratio_low": ratio[1] if ratio else None,
                    "ratio_high": ratio[2] if ratio else None,
                    "rounds": [i + 1 for i, tiles in enumerate(self.rounds) if tile in tiles],
                    "error": self.failed.get(tile, ""),
                }
            )
        order = {"best": 0, "not distinguishable from best": 1, "worse": 2, "not measured": 3, "failed": 4}
        return sorted(rows, key=lambda r: (order[r["verdict"]], r["ratio"] if r["ratio"] is not None else math.inf))

    def result(self) -> dict[str, Any]:
        ranking, lead, status = self.ranking(), self.leader(), self.status()
        tied = [r["tile"] for r in ranking if r["verdict"] == "not distinguishable from best"]
        if lead is None:
            summary = f"{status}: no tile was measured ({len(self.failed)} failed)"
        else:
            best = summarize(self.samples[lead])
            summary = f"best {lead}: {best.text()}"
            if tied:
                summary += f"; not distinguishable from it: {', '.join(tied)}"
            worse = sum(r["verdict"] == "worse" for r in ranking)
            summary += f"; {worse} worse, {len(self.failed)} failed; {len(self.rounds)} rounds, {self.probes} probes"
        if self.stopped:
            summary += f"; {self.stopped}"
        if status == "running" and self.outstanding:
            summary = f"running: round {len(self.rounds)}, {len(self.outstanding)} probe run(s) under way"
        return {
            "status": status,
            "best": lead if status != "running" else None,
            "tied": tied,
            "ranking": ranking,
            "rounds": len(self.rounds),
            "probes": self.probes,
            "stopped": self.stopped,
            "summary": summary,
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TileRace:
        return cls(**data)


# -- the campaign side ---------------------------------------------------------------------------------------


PARAMS: dict[str, tuple[Any, dict[str, Any]]] = {
    "campaign": campaign_param("A campaign whose benchmark takes a tile (benchmark.args.tile) and runs one case."),
    "case": (
        "m=64",
        {
            "type": "string",
            "pattern": r"^m=[0-9]{1,5}$",
            "title": "Case",
            "description": "The token count to tune for, as the warehouse names it (m=64).",
        },
    ),
    "metric": (
        "us_per_token",
        {"type": "string", "pattern": r"^[a-z][a-z0-9_]{0,62}$", "title": "Metric", "description": "What to beat."},
    ),
    "tiles": (
        DEFAULT_TILES,
        {
            "type": "array",
            "items": {"type": "string", "pattern": TILE.pattern},
            "minItems": 1,
            "maxItems": 200,
            "title": "Tiles",
            "description": "Each a BLOCK_M=..,BLOCK_N=..,BLOCK_K=..,GROUP_M=..,num_warps=..,num_stages=.. tile.",
        },
    ),
    "repeats": (
        3,
        {"type": "integer", "minimum": 2, "maximum": 20, "title": "Repeats per probe", "description": "Unit: values."},
    ),
    "max_samples": (
        12,
        {
            "type": "integer",
            "minimum": 2,
            "maximum": 60,
            "title": "Values per tile at most",
            "description": "Unit: values.",
        },
    ),
    "max_probes": (
        60,
        {"type": "integer", "minimum": 1, "maximum": 1000, "title": "Probe budget", "description": "Unit: runs."},
    ),
    "max_hours": MAX_HOURS_PARAM,
}


class TileStrategy(
    StrategyBase,
    declared=Declared("tiles", DAG_ID, "tiles", MAX_ROUNDS, PARAMS, ("bench", "tile-search"), TileRace),
):
    """The tile search's campaign side, for :mod:`benchflow.searches.engine`."""

    ranked_by = ("tile", "n", "mean")

    def check_spec(self, spec: CampaignSpec) -> str:
        if not spec.result_kind.case_args or "tile" not in spec.benchmark.args:
            return f"{spec.name!r} has no benchmark that takes a tile (benchmark.args.tile) and runs one case"
        return ""

    def begin(self, conf: dict[str, Any], spec: CampaignSpec, warehouse: Warehouse | None) -> Search:
        kind = spec.result_kind
        if conf["metric"] not in kind.trends():
            raise ConfError("metric", f"{conf['metric']!r} is not a trend metric of {kind.name} ({kind.trends()})")
        if conf["max_samples"] < conf["repeats"]:
            raise ConfError("max_samples", f"{conf['max_samples']} is fewer than repeats ({conf['repeats']})")
        tiles = list(dict.fromkeys(conf["tiles"]))
        race = TileRace(
            tiles=tiles,
            better=kind.better(conf["metric"]),
            repeats=conf["repeats"],
            max_samples=conf["max_samples"],
            max_probes=conf["max_probes"],
            max_seconds=conf["max_hours"] * 3600.0,
        )
        search = self.new_search(spec, conf, {"case": conf["case"], "metric": conf["metric"]})
        search.state = race.to_json()
        return search

    def next_round(self, algo: TileRace, now: float, slots: int) -> list[tuple[str, int]]:
        return [(tile, 0) for tile in algo.next_round(now)]

    def probe_confs(
        self, search: Search, spec: CampaignSpec, picks: list[tuple[str, int]], hosts: list[str]
    ) -> list[Probe]:
        base = spec.result_kind.case_conf(search.facts["case"], search.conf["repeats"])
        return [
            Probe(short(tile), hosts[i % len(hosts)], [tile], {**base, "tile": tile})
            for i, (tile, _) in enumerate(picks)
        ]

    def read(self, search: Search, algo: TileRace, spec: CampaignSpec, probe: Probe, warehouse: Warehouse) -> dict:
        from benchflow.warehouse import queries  # the warehouse: a task's, never loaded at DAG parse

        (tile,) = probe.keys
        if warehouse.schema_version() == 0:
            return {tile: f"run {probe.run_id} loaded nothing"}
        found = queries.probe_samples(warehouse, search.campaign_dag_id, probe.run_id, search.facts["case"],
                                      search.facts["metric"])  # fmt: skip
        if not len(found):
            return {tile: f"run {probe.run_id} gave no valid values"}
        return {tile: [float(v) for v in found["value"]]}

    def take(self, algo: TileRace, key: str, found: Any) -> None:
        if isinstance(found, str):
            algo.record(key, [], found)
        else:
            algo.record(key, found)

    def answer(self, search: Search, algo: TileRace) -> dict[str, Any]:
        return algo.result()

    def lines(self, result: dict[str, Any]) -> list[str]:
        lines = [f"tile search: {result['summary']}", ""]
        for rank, r in enumerate(result["ranking"], start=1):
            shown = "-" if r["mean"] is None else f"{r['mean']:.4g} (95 % CI {r['low']:.4g}–{r['high']:.4g}) n={r['n']}"
            ratio = "" if r["ratio"] is None else f"  ×{r['ratio']:.3f} ({r['ratio_low']:.3f}–{r['ratio_high']:.3f})"
            lines.append(f"{rank:>3}  {r['verdict']:<30} {r['tile']}  {shown}{ratio}")
            if r["error"]:
                lines.append(f"      failed: {r['error']}")
        return lines

    def round_line(self, algo: TileRace) -> str:
        return str(algo.result()["summary"])

    def opening(self, search: Search, run_id: str) -> str:
        return f"tile search {search.campaign} {search.facts['case']}: {len(search.conf['tiles'])} tiles; run {run_id}"

    def answered(self, result: dict[str, Any]) -> bool:
        return bool(result.get("best"))


register(TileStrategy())
