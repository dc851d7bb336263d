"""Result blocks rendered from the label table (plugins/benchflow/kinds/serving/labels.tsv) in each version
family's layout, put through what pastes do to text, every value checked against what was rendered.

Families follow the tools' print statements as the label table's sources record them (widths ``{:<40}
{:<10}``, ``{:=^50}`` headers, ``{:-^50}`` sections, units as suffixes before 2024-03, vLLM's lines above its
block, SGLang's blank line before its header). Values are random (seeded): a test failure names the family,
the transform and the seed's values. Every label rendered must be in the table for its tool."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from benchflow.kinds import parse_text
from benchflow.kinds.serving.common import COLUMNS, INTS
from benchflow.kinds.serving.labels import LABELS_FILE, PREAMBLE, read_table
from benchflow.kinds.serving.text_output import MIN_HEADLESS

pytestmark = pytest.mark.unit

TABLE = read_table(LABELS_FILE)
BY_LABEL = {(row["tool"], row["label"]): row for row in TABLE}

TTFT, TPOT, ITL, E2EL = (
    "Time to First Token",
    "Time per Output Token (excl. 1st token)",
    "Inter-token Latency",
    "End-to-end Latency",
)


@dataclass(frozen=True)
class Family:
    """A version family's layout: its tool, header (None: the f-string families print none), the lines above
    its block, and its block's sections as (title or None, labels)."""

    name: str
    tool: str
    header: str | None
    above: tuple[str, ...]
    sections: tuple[tuple[str | None, tuple[str, ...]], ...]
    blank_before: bool = False  # SGLang prints an empty line before its header
    suffix_units: bool = False  # "Label: value unit" f-strings (vLLM before 2024-03-27, SGLang before 2024-07)
    extra: tuple[str, ...] = field(default=())  # lines no label: a heading with no value, index rows


def stats(metric: str, *percentiles: str, std: bool = False) -> tuple[str, ...]:
    return (
        (f"Mean {metric} (ms)", f"Median {metric} (ms)")
        + (f"Std Dev {metric} (ms)",) * std
        + tuple(f"P{p} {metric} (ms)" for p in percentiles)
    )


SERVING = " Serving Benchmark Result "
VLLM_ABOVE = ("Traffic request rate", "Burstiness factor", "Maximum request concurrency")
COUNTS = ("Successful requests", "Benchmark duration (s)", "Total input tokens", "Total generated tokens")
FAMILIES = (
    Family(
        "vllm-2023",
        "vllm",
        None,
        (),
        ((None, ("Total time", "Throughput", "Average latency", "Average latency per token")),),
        suffix_units=True,
    ),
    Family(
        "vllm-early-2024",
        "vllm",
        None,
        ("Traffic request rate",),
        (
            (
                None,
                (
                    "Successful requests",
                    "Benchmark duration",
                    "Total input tokens",
                    "Total generated tokens",
                    "Request throughput",
                    "Input token throughput",
                    "Output token throughput",
                    "Mean TTFT",
                    "Median TTFT",
                    "P99 TTFT",
                    "Mean TPOT",
                    "Median TPOT",
                    "P99 TPOT",
                ),
            ),
        ),
        suffix_units=True,
    ),
    Family(
        "vllm-2024-fixed",
        "vllm",
        SERVING,
        ("Traffic request rate",),
        (
            (
                None,
                (
                    *COUNTS,
                    "Request throughput (req/s)",
                    "Input token throughput (tok/s)",
                    "Output token throughput (tok/s)",
                ),
            ),
            (TTFT, stats("TTFT", "99")),
            (TPOT, stats("TPOT", "99")),
            (ITL, stats("ITL", "99")),
        ),
    ),
    Family(
        "vllm-2024-percentiles",
        "vllm",
        SERVING,
        VLLM_ABOVE,
        (
            (
                None,
                (
                    *COUNTS,
                    "Request throughput (req/s)",
                    "Request goodput (req/s)",
                    "Output token throughput (tok/s)",
                    "Total Token throughput (tok/s)",
                ),
            ),
            (TTFT, stats("TTFT", "50", "90", "95", "99")),
            (TPOT, stats("TPOT", "90", "99")),
            (ITL, stats("ITL", "99")),
            (E2EL, stats("E2EL", "95", "99.9", "99")),
        ),
    ),
    Family(
        "vllm-bench-serve",
        "vllm",
        SERVING,
        VLLM_ABOVE,
        (
            (
                None,
                (
                    "Successful requests",
                    "Failed requests",
                    "Maximum request concurrency",
                    "Request rate configured (RPS)",
                    *COUNTS[1:],
                    "Request throughput (req/s)",
                    "Output token throughput (tok/s)",
                    "Peak output token throughput (tok/s)",
                    "Peak concurrent requests",
                    "Total token throughput (tok/s)",
                ),
            ),
            (TTFT, stats("TTFT", "99")),
            (TPOT, stats("TPOT", "99")),
            (ITL, stats("ITL", "99")),
            ("Speculative Decoding", ("Acceptance rate (%)", "Acceptance length", "Drafts", "Draft tokens")),
        ),
        extra=("Per-position acceptance (%):", "  Position 0:                            88.10     "),
    ),
    Family(
        "sglang-2024-old",
        "sglang",
        None,
        (),
        (
            (
                None,
                (
                    "Total time",
                    "Request throughput",
                    "Decoding throughput",
                    "Average latency",
                    "Average latency per output token",
                ),
            ),
        ),
        suffix_units=True,
    ),
    Family(
        "sglang-v0.2",
        "sglang",
        SERVING,
        (),
        (
            (
                None,
                (
                    "Backend",
                    "Traffic request rate",
                    *COUNTS,
                    "Total generated tokens (retokenized)",
                    "Request throughput (req/s)",
                    "Input token throughput (tok/s)",
                    "Output token throughput (tok/s)",
                ),
            ),
            ("End-to-End Latency", ("Mean E2E Latency (ms)", "Median E2E Latency (ms)")),
            (TTFT, stats("TTFT", "99")),
            (TPOT, stats("TPOT", "99")),
            ("Inter-token Latency", stats("ITL", "99")),
        ),
        blank_before=True,
    ),
    Family(
        "sglang-v0.4",
        "sglang",
        SERVING,
        (),
        (
            (
                None,
                (
                    "Backend",
                    "Traffic request rate",
                    "Max reqeuest concurrency",
                    *COUNTS,
                    "Total generated tokens (retokenized)",
                    "Request throughput (req/s)",
                    "Input token throughput (tok/s)",
                    "Output token throughput (tok/s)",
                    "Total token throughput (tok/s)",
                    "Concurrency",
                    "Accept length",
                ),
            ),
            ("End-to-End Latency", ("Mean E2E Latency (ms)", "Median E2E Latency (ms)")),
            (TTFT, stats("TTFT", "99")),
            ("Inter-Token Latency", (*stats("ITL", "95", "99"), "Max ITL (ms)")),
        ),
        blank_before=True,
    ),
    Family(
        "sglang-2026",
        "sglang",
        SERVING,
        (),
        (
            (
                None,
                (
                    "Backend",
                    "Traffic request rate",
                    "Max request concurrency",
                    *COUNTS[:3],
                    "Total input text tokens",
                    *COUNTS[3:],
                    "Request throughput (req/s)",
                    "Input token throughput (tok/s)",
                    "Output token throughput (tok/s)",
                    "Peak output token throughput (tok/s)",
                    "Peak concurrent requests",
                    "Total token throughput (tok/s)",
                    "Concurrency",
                ),
            ),
            (
                "End-to-End Latency",
                (
                    "Mean E2E Latency (ms)",
                    "Median E2E Latency (ms)",
                    *tuple(f"P{p} E2E Latency (ms)" for p in ("90", "95", "99")),
                ),
            ),
            (TTFT, stats("TTFT", "90", "95", "99")),
            (TPOT, stats("TPOT", "90", "95", "99")),
            ("Inter-Token Latency", (*stats("ITL", "90", "95", "99"), "Max ITL (ms)")),
        ),
        blank_before=True,
    ),
    Family(
        "sglang-offline",
        "sglang",
        " Offline Throughput Benchmark Result ",
        (),
        (
            (
                None,
                (
                    "Backend",
                    *COUNTS,
                    "Last generation throughput (tok/s)",
                    "Request throughput (req/s)",
                    "Input token throughput (tok/s)",
                    "Output token throughput (tok/s)",
                    "Total token throughput (tok/s)",
                ),
            ),
        ),
        blank_before=True,
    ),
    Family(
        "trtllm-fork",
        "vllm",
        SERVING,
        (*VLLM_ABOVE, "Total failed requests"),
        (
            (
                None,
                (
                    "Total requests",
                    "Successful requests",
                    "Failed requests",
                    *COUNTS[1:],
                    "Request throughput (req/s)",
                    "Output token throughput (tok/s)",
                    "Total Token throughput (tok/s)",
                    "User throughput (tok/s)",
                ),
            ),
            (TTFT, stats("TTFT", "99", std=True)),
            (ITL, stats("ITL", "99", std=True)),
            (" Energy Metrics ", ("Total Energy (J)", "Total GPU Power (W)")),
        ),
    ),
    Family(
        "fastdeploy-fork",
        "vllm",
        SERVING,
        (*VLLM_ABOVE, "Drop ratio"),
        (
            (None, (*COUNTS, "Request throughput (req/s)", "Output token throughput (tok/s)")),
            ("解码速度(tok/s)", ("Mean Decode", "Median Decode", "P99 Decode")),
            (TTFT, stats("TTFT", "80", "95", "99", "99.9")),
        ),
    ),
)


@dataclass
class Rendered:
    """An output as a tool prints it, and what a person reads off it: column → value in the column's unit."""

    lines: list[str]
    expected: dict[str, float | int | None]
    figures: dict[str, int] = field(default_factory=dict)  # label → index of its line, for the block's figures
    start: int = 0  # index of the block's first line (its header, or its first label)

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def entry(tool: str, label: str) -> dict[str, str]:
    """The table's row for a label a family prints (a percentile through its ``P{p}`` row)."""
    if (tool, label) in BY_LABEL:
        return BY_LABEL[(tool, label)]
    for row in TABLE:
        if row["tool"] == tool and "{p}" in row["label"] and label.startswith("P"):
            p = label[1:].split()[0]
            if row["label"].replace("{p}", p) == label:
                column = row["column"].replace("{p}", p)
                return {**row, "column": column if column in COLUMNS else "ignored", "label": label}
    raise AssertionError(f"{tool} label {label!r} is not in labels.tsv")


def value_for(rng: random.Random, label: str, row: dict[str, str]) -> tuple[str, float | int | None]:
    """A printed value for a label and what it is in its column's unit (None: not stored)."""
    column = row["column"]
    if label == "Backend":
        return rng.choice(["sglang", "vllm", "sglang-oai"]), None
    if label == "Burstiness factor":
        return "1.0 (Poisson process)", None
    if column == "request_rate":
        rate = rng.choice([math.inf, 4.0, 16.0])
        return ("inf" if math.isinf(rate) else f"{rate:.1f}"), rate
    if column == "concurrency" and label == "Max reqeuest concurrency" and rng.random() < 0.5:
        return "not set", None
    if label == "Concurrency":  # SGLang's measured mean: ignored
        return f"{rng.uniform(1, 64):.2f}", None
    if column in INTS:
        number = rng.randint(1, 5000)
        return (f"{number:.2f}" if label == "Peak concurrent requests" and row["tool"] == "vllm" else str(number)), (
            number if column != "ignored" else None
        )
    number = round(rng.uniform(0.5, 5000.0), 2)
    printed = f"{number:.6f}" if label == "Benchmark duration" else f"{number:.2f}"
    if column == "ignored":
        return printed, None
    scaled = float(f"{float(printed) * float(row['scale'] or 1):.12g}")
    return printed, scaled


def render(family: Family, rng: random.Random) -> Rendered:
    """One run of ``family`` with random values."""
    out = Rendered([], {})
    for label in family.above:
        printed, value = value_for(rng, label, entry(family.tool, label))
        out.lines.append(f"{label}: {printed}")
        _expect(out, entry(family.tool, label)["column"], value, label, len(out.lines) - 1)
    if family.blank_before:
        out.lines.append("")
    out.start = len(out.lines)
    if family.header is not None:
        out.lines.append(f"{family.header:=^50}")
    for title, labels in family.sections:
        if title is not None:
            out.lines.append(f"{title:-^50}")
        for label in labels:
            row = entry(family.tool, label)
            printed, value = value_for(rng, label, row)
            if family.suffix_units:
                unit = f" {row['unit']}" if row["unit_place"] == "suffix" else ""
                out.lines.append(f"{label}: {printed}{unit}")
            else:
                out.lines.append("{:<40} {:<10}".format(label + ":", printed))
            _expect(out, row["column"], value, label, len(out.lines) - 1)
    out.lines += list(family.extra)
    if family.header is not None:
        out.lines.append("=" * 50)
    return out


def _expect(out: Rendered, column: str, value: float | int | None, label: str, index: int) -> None:
    if column == "ignored":
        return
    if column in PREAMBLE and column in out.expected and out.expected[column] is not None:
        return  # printed above the block and in it: the first one stands
    out.expected[column] = value
    if column not in PREAMBLE and index >= out.start:
        out.figures[label] = index


def values_right(rendered: Rendered, row: dict) -> list[str]:
    wrong = []
    for column, want in rendered.expected.items():
        got = row.get(column)
        if want is None or (isinstance(want, float) and math.isinf(want)):
            if got != want:
                wrong.append(f"{column}: want {want!r}, got {got!r}")
        elif got is None or abs(float(got) - float(want)) > 1e-9 * max(1.0, abs(float(want))):
            wrong.append(f"{column}: want {want!r}, got {got!r}")
    return wrong


# What pastes do to text: each takes the rendered lines and gives the text a parser gets.
def prefixed(prefix: str) -> Callable[[list[str]], str]:
    return lambda lines: "".join(prefix + line + "\n" for line in lines)


def fenced(lines: list[str]) -> str:
    return "Results:\n```text\n" + "\n".join(lines) + "\n```\nThat is all.\n"


def json_strings(lines: list[str]) -> str:
    return json.dumps(lines, indent=2, ensure_ascii=False) + "\n"


def notebook(lines: list[str]) -> str:
    cell = {"cell_type": "code", "outputs": [{"name": "stdout", "text": [line + "\n" for line in lines]}]}
    return json.dumps({"cells": [cell]}, indent=1, ensure_ascii=False) + "\n"


def flattened(lines: list[str]) -> str:
    """A web page's text: the lines joined by one space, runs of spaces collapsed."""
    return " ".join(" ".join(line.split()) for line in lines if line.strip()) + "\n"


def crlf(lines: list[str]) -> str:
    return "".join(line + "\r\n" for line in lines)


def tabs(lines: list[str]) -> str:
    return "".join(line.rstrip().replace(":" + " " * 2, ":\t").replace("  ", "\t") + "\n" for line in lines)


def collapsed(lines: list[str]) -> str:
    """A rendered web page copied line by line: every run of spaces one space."""
    return "".join(" ".join(line.split()) + "\n" for line in lines)


def layered(lines: list[str]) -> str:
    """A compose log of a run pasted into a fenced block on Windows."""
    return crlf(["```", *(f"bench-1  | {line}" for line in lines), "```"])


def one_line_list(lines: list[str]) -> str:
    """The block's lines as one JSON list on one line (a log that printed ``json.dumps(lines)``)."""
    return json.dumps(lines, ensure_ascii=False) + "\n"


def html_lines(lines: list[str]) -> str:
    return "<div>" + "<br/>".join(lines) + "</div>\n"


def markdown_table(lines: list[str]) -> str:
    """Every ``label: value`` line as a row of a two-column table; the other lines as they are."""
    rows = [
        f"| {line.split(':', 1)[0].strip()} | {line.split(':', 1)[1].strip()} |" if ":" in line else line
        for line in lines
    ]
    return "| Metric | Value |\n|---|---|\n" + "\n".join(rows) + "\n"


TRANSFORMS: dict[str, Callable[[list[str]], str]] = {
    "plain": lambda lines: "\n".join(lines) + "\n",
    "comment": prefixed("# "),
    "vllm-log": prefixed("INFO 07-02 09:38:25 [serve.py:1] "),
    "compose": prefixed("svc-1  | "),
    "fenced": fenced,
    "json-strings": json_strings,
    "notebook": notebook,
    "flattened": flattened,
    "crlf": crlf,
    "tabs": tabs,
    "collapsed": collapsed,
    "layered": layered,
    "one-line-list": one_line_list,
    "html-lines": html_lines,
    "markdown-table": markdown_table,
    "bullets": prefixed("* "),
    "colours": lambda lines: "".join(f"\x1b[0;36m{line}\x1b[0m\n" for line in lines),
    "logger": prefixed("INFO:benchmark_serving:"),
}
SEED = 21


def cases() -> list[tuple[Family, str]]:
    return [(family, name) for family in FAMILIES for name in TRANSFORMS]


@pytest.mark.parametrize(("family", "transform"), cases(), ids=lambda x: x.name if isinstance(x, Family) else x)
def test_every_value_of_every_family_survives_what_pastes_do(family: Family, transform: str):
    rendered = render(family, random.Random(f"{SEED}-{family.name}-{transform}"))
    parsed = parse_text(TRANSFORMS[transform](rendered.lines), "serving")
    assert len(parsed.rows) == 1, (parsed.rows, parsed.warnings)
    assert not values_right(rendered, parsed.rows[0]), (values_right(rendered, parsed.rows[0]), parsed.warnings)
    assert not parsed.dropped, parsed.problem_lines()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_each_family_is_detected_and_reads_whole(family: Family):
    rendered = render(family, random.Random(f"{SEED}-{family.name}-detected"))
    parsed = parse_text(rendered.text)
    assert parsed.format == "log" and parsed.complete, parsed.warnings
    assert not values_right(rendered, parsed.rows[0])


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_runs_one_after_another_are_rows_of_their_own(family: Family):
    rng = random.Random(f"{SEED}-{family.name}-runs")
    runs = [render(family, rng) for _ in range(3)]
    text = "\n".join("\n".join([f"run {n}:", *run.lines, ""]) for n, run in enumerate(runs, 1))
    parsed = parse_text(text)
    assert len(parsed.rows) == 3, parsed.warnings
    for run, row in zip(runs, parsed.rows, strict=True):
        assert not values_right(run, row), values_right(run, row)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_stray_line_inside_a_block_loses_nothing(family: Family):
    rendered = render(family, random.Random(f"{SEED}-{family.name}-stray"))
    figures = sorted(rendered.figures.values())
    at = next(index for index in figures[1:] if index - 1 in figures)  # between two figures
    lines = [*rendered.lines[:at], "(this run was on the second node)", *rendered.lines[at:]]
    parsed = parse_text("\n".join(lines) + "\n")
    assert len(parsed.rows) == 1 and not values_right(rendered, parsed.rows[0]), parsed.warnings
    assert (
        f"line {at + 1}: skipped a line inside a result block: '(this run was on the second node)'" in parsed.warnings
    )


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_forks_extra_section_is_reported_and_the_block_goes_on(family: Family):
    rendered = render(family, random.Random(f"{SEED}-{family.name}-fork"))
    at = sorted(rendered.figures.values())[len(rendered.figures) // 2] + 1
    section = [f"{'Fork Extras':-^50}", "{:<40} {:<10}".format("Fork cache hits (%):", "41.50"), f"{'':-^50}"]
    lines = [*rendered.lines[:at], *section, *rendered.lines[at:]]
    parsed = parse_text("\n".join(lines) + "\n")
    assert len(parsed.rows) == 1 and not values_right(rendered, parsed.rows[0]), parsed.warnings
    assert f"line {at + 2}: unknown label 'Fork cache hits (%)'" in parsed.warnings


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_preamble_and_a_dashed_line_inside_a_block_end_nothing(family: Family):
    rendered = render(family, random.Random(f"{SEED}-{family.name}-preamble"))
    at = rendered.lines.index(f"{family.header:=^50}") + 1 if family.header else len(family.above)
    preamble = ["Hardware: 8x H200", "Nodes: 2", "-" * 50]
    lines = [*rendered.lines[:at], *preamble, *rendered.lines[at:]]
    parsed = parse_text("\n".join(lines) + "\n")
    assert len(parsed.rows) == 1 and not values_right(rendered, parsed.rows[0]), parsed.warnings
    assert any(w.startswith(f"line {at + 2}: unknown label 'Nodes'") for w in parsed.warnings), parsed.warnings


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_block_cut_off_keeps_what_it_has_and_reports_the_rest(family: Family):
    rendered = render(family, random.Random(f"{SEED}-{family.name}-cut"))
    indexes = sorted(rendered.figures.values())
    cut = indexes[max(len(indexes) // 2, MIN_HEADLESS - 1)]
    kept = {label for label, index in rendered.figures.items() if index <= cut}
    text = "\n".join(rendered.lines[: cut + 1]) + "\n" + rendered.lines[cut + 1][:7]  # a line cut mid-label
    parsed = parse_text(text)
    assert len(parsed.rows) == 1, parsed.warnings
    row = parsed.rows[0]
    for label in kept:
        column = entry(family.tool, label)["column"]
        assert row[column] == pytest.approx(rendered.expected[column], rel=1e-9) or (
            rendered.expected[column] is None and row[column] is None
        ), label
    assert not parsed.dropped, parsed.problem_lines()
    if family.header is not None:  # a headed block names where it was cut; one without a header has no end to miss
        assert any("cut off at the end of the output" in p.message for p in parsed.problems), parsed.warnings


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.header is None], ids=lambda f: f.name)
def test_too_few_labels_without_a_header_are_no_row_and_each_is_reported(family: Family):
    rendered = render(family, random.Random(f"{SEED}-{family.name}-few"))
    first = sorted(rendered.figures.values())[: MIN_HEADLESS - 1]
    parsed = parse_text("".join(rendered.lines[index] + "\n" for index in first), "serving")
    assert parsed.rows == []
    for line, index in enumerate(first, 1):
        label = rendered.lines[index].split(":")[0]
        assert f"line {line}: {label!r} outside a result block (fewer than 3 figures together): not read" in (
            parsed.warnings
        )
