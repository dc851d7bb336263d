"""``bench``: check specs, parse benchmark output, run a campaign through Airflow.

bench validate [SPEC ...]                 check campaign specs; errors by file, line and field
bench parse FILE [--kind K] [--format F]  tidy rows of a benchmark output as JSON lines
bench run CAMPAIGN [-v]                   run one campaign through Airflow (dag.test) and print its rows
bench sql QUERY [--format F] [--out FILE]  one read statement against the warehouse (text, csv, json, parquet)
bench compare A B [--point P] [--metric M]  is B better than A? (configs, runs or nights; 95 % intervals)
bench migrate                             create or update the warehouse's tables and views
bench pools                               create the Airflow pool of every spec's host (one slot each)
bench up [--port N] [--db D]              start Airflow for this project here (no Docker); bench down stops it
bench airflow ARGS                        Airflow's CLI on this checkout's metadata DB (connections, variables)
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchtools.airflow_env import configure_airflow, ensure_pools, quiet_short_secrets


def cmd_validate(args: argparse.Namespace) -> int:
    """Every check the DAG build makes (schema, size limits, trigger-form defaults, reserved and duplicate names,
    encoding, the build itself within a spec's time budget), never with a traceback."""
    from benchflow.spec import SpecError, spec_paths

    configure_airflow()
    from benchflow.factory import load_and_build, warm_up

    warm_up()
    errors: list[SpecError] = []
    paths = list(map(Path, args.specs)) if args.specs else None
    if paths is None:
        paths, errors = spec_paths()
    good = 0
    for path in paths:
        try:
            spec, _ = load_and_build(path)
        except SpecError as exc:
            errors.append(exc)
            continue
        good += 1
        print(f"{spec.name}: ok ({spec.dag_id}, kind {spec.kind}, host {spec.host}, payload {spec.payload_name})")
        for line in space_lines(spec):
            print(line)
    for error in errors:
        print("\n".join(error.lines()), file=sys.stderr)
    if errors:
        print(f"{len(errors)} of {good + len(errors)} specs invalid", file=sys.stderr)
    return 1 if errors else 0


def space_lines(spec: Any) -> list[str]:
    """What a spec's config space expands to: each kept config with its values and GPUs, each excluded
    combination with the constraint that left it out (none for a spec without a space)."""
    from benchflow.space import gpu_count

    if spec.space is None:
        return []
    expansion = spec.space.expand()
    lines = [
        f"  space: {len(expansion.configs)} configs kept, {len(expansion.excluded)} excluded "
        f"({spec.space.combinations()} combinations)"
    ]
    for config in spec.configs:
        values = ", ".join(f"{k}={v}" for k, v in expansion.values[config.name].items())
        n = gpu_count(config)
        lines.append(f"    keep     {config.name} ({values}; {n} GPU{'s' if n > 1 else ''})")
    lines += [f"    exclude  {e.reason}" for e in expansion.excluded]
    return lines


MAX_PARSE_BYTES = 256 * 2**20  # bench parse reads a benchmark's output whole: more than this is not one


def read_output(path: Path) -> str:
    """A benchmark output file's text; OSError for what is not a regular file (a FIFO would block, a device such
    as /dev/zero never ends) or is larger than :data:`MAX_PARSE_BYTES`. The checks are made on the file opened
    (non-blocking), not on its name, so the file read is the file checked."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or folder): nothing to parse")
        if info.st_size > MAX_PARSE_BYTES:
            raise OSError(
                errno.EFBIG, f"{info.st_size} bytes, over the {MAX_PARSE_BYTES // 2**20} MiB bench parse reads"
            )
        return handle.read(MAX_PARSE_BYTES + 1).decode(errors="replace")


def cmd_parse(args: argparse.Namespace) -> int:
    from benchflow import kinds
    from benchflow.parsing import ParseError, strict_row

    path = Path(args.file)
    kind, fmt, marker, options = args.kind, args.format, args.marker, {}
    if args.spec:
        from benchflow.spec import SpecError, find_spec, load_spec

        try:
            spec = load_spec(find_spec(args.spec))
        except SpecError as exc:
            print(exc, file=sys.stderr)
            return 2
        kind, fmt, marker = spec.kind, spec.benchmark.format, spec.benchmark.marker
        options = spec.benchmark.parser_options()
    try:
        text = read_output(path)
        found, reader = kinds.resolve(text, kind, fmt)
        parsed = reader.parse(text, marker=marker, **options)
    except OSError as exc:
        print(f"{path}: {exc.strerror}", file=sys.stderr)
        return 2
    except (ParseError, KeyError) as exc:
        print(f"{path}: {str(exc).strip(chr(34))}", file=sys.stderr)
        return 1
    for row in parsed.rows:
        print(json.dumps(strict_row(row)[0], allow_nan=False))
    state = "complete" if parsed.complete else f"incomplete (no {marker})"
    print(f"{path}: {found.name}/{parsed.format}, {len(parsed.rows)} rows, {state}", file=sys.stderr)
    for warning in parsed.warnings:
        print(f"{path}: warning: {warning}", file=sys.stderr)
    if not parsed.rows:  # a kind or format (named or detected) that reads nothing is an error, and says why
        why = "; ".join(parsed.problem_lines()[:3]) or "no line of it reads as a result"
        print(f"{path}: no rows as {found.name}/{parsed.format}: {why}", file=sys.stderr)
        return 1
    return 1 if parsed.dropped else 0  # rows were printed either way; non-zero only when something was lost


def cmd_pools(args: argparse.Namespace) -> int:
    configure_airflow()
    for line in ensure_pools():
        print(line)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """One campaign through Airflow (``dag.test`` in a child process), quietly: a line per task, the wait's
    progress, the table; Airflow's logs in a file (``-v`` shows them). See :mod:`benchtools.runner`."""
    from benchflow.spec import SpecError, find_spec, load_spec

    try:
        path = find_spec(args.campaign)
        spec = load_spec(path)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.conf:
        try:
            json.loads(args.conf)
        except ValueError as exc:
            print(f"--conf is not JSON: {exc}", file=sys.stderr)
            return 2
    configure_airflow()
    from benchtools import runner, up

    if problem := up.unreachable(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]):
        print(f"bench run: {problem}", file=sys.stderr)
        return 1

    return runner.run(spec, Path(path).resolve(), args.conf, verbose=args.verbose)


def cmd_search(args: argparse.Namespace) -> int:
    """A config search of a campaign's config space on this machine (each probe a bench run)."""
    return _search("search", "config", args.campaign, args.conf, {})


def cmd_bisect(args: argparse.Namespace) -> int:
    """A bisection of a campaign's payload commits on this machine (each probe a bench run)."""
    fields = {"case": args.case, "metric": args.metric, "good": args.good, "bad": args.bad}
    return _search("bisect", "bisect", args.campaign, args.conf, fields)


def cmd_tune(args: argparse.Namespace) -> int:
    """A tile search of a kernel campaign on this machine (each probe a bench run)."""
    return _search("tune", "tiles", args.campaign, args.conf, {"case": args.case})


def _search(command: str, strategy: str, campaign: str, text: str | None, fields: dict[str, Any]) -> int:
    """One search through the search engine's steps, each probe a bench run; 2 for a conf it refuses."""
    from benchflow.params import ConfError

    try:
        conf = json.loads(text) if text else {}
    except ValueError as exc:
        print(f"--conf is not JSON: {exc}", file=sys.stderr)
        return 2
    configure_airflow()
    from benchtools import searching, up

    if problem := up.unreachable(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]):
        print(f"bench {command}: {problem}", file=sys.stderr)
        return 1
    try:
        return searching.search(strategy, {**conf, **fields, "campaign": campaign})
    except ConfError as exc:
        print(f"bench {command}: {exc}", file=sys.stderr)
        return 2


def _read(query: str, timeout_s: float) -> Any:
    """The statement's answer as a DataFrame: from the default DuckDB snapshot without Airflow when nothing names
    another warehouse, else from the one Airflow's connection ``bench_warehouse`` names."""
    from benchflow.warehouse import Warehouse, default_path, frame_of
    from benchflow.warehouse.readonly import check
    from benchtools.airflow_env import default_warehouse_only

    if default_warehouse_only():
        from benchflow.warehouse import snapshot

        where = snapshot.snapshot_of(default_path())
        return frame_of(*snapshot.read_statement(lambda: snapshot.open_snapshot(where), check(query), timeout_s))
    configure_airflow()
    return Warehouse.from_airflow(read_only=True).read(query, timeout_s)


def cmd_sql(args: argparse.Namespace) -> int:
    """One read statement against the warehouse (the published snapshot, or a read-only PostgreSQL
    transaction), printed as a table or written as CSV, JSON or Parquet."""
    from benchflow.warehouse.readonly import RefusedStatement

    if args.format == "parquet" and not args.out:
        print("bench sql: --format parquet writes a file: give --out FILE", file=sys.stderr)
        return 2
    try:
        frame = _read(args.query, args.timeout)
    except TimeoutError as exc:
        print(f"bench sql: {exc} (--timeout {args.timeout:g})", file=sys.stderr)
        return 1
    except RefusedStatement as exc:
        print(f"bench sql: {exc}", file=sys.stderr)
        print("bench sql is read-only: it runs queries, never changes the warehouse", file=sys.stderr)
        return 1
    except Exception as exc:  # duckdb's and psycopg's errors share no base class worth naming here
        print(f"bench sql: {exc}", file=sys.stderr)
        if any(word in str(exc).lower() for word in ("read-only", "read only", "operations are disabled")):
            print("bench sql is read-only: it runs queries, never changes the warehouse", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else None
    if out is not None and out.is_symlink():
        print(
            f"bench sql: {out} is a symbolic link: not followed, nothing written (give the file itself)",
            file=sys.stderr,
        )
        return 1
    frame, renamed = unique_columns(frame)
    for old_name, new_name in renamed:
        print(f"bench sql: two result columns are named {old_name!r}: the second is {new_name!r}", file=sys.stderr)
    try:
        write_frame(frame, args.format, out)
    except OSError as exc:
        print(f"bench sql: {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if args.out:
        print(f"{args.out}: {len(frame)} rows, {len(frame.columns)} columns ({args.format})", file=sys.stderr)
    return 0


SQL_FORMATS = ("text", "csv", "json", "parquet")


def unique_columns(frame: Any) -> tuple[Any, list[tuple[str, str]]]:
    """The frame with each repeated column name made unique (``m``, ``m_2``), and what was renamed: JSON objects
    and Parquet files cannot hold two columns of one name, and a CSV header with two would be ambiguous."""
    seen: set[str] = set()
    names, renamed = [], []
    for name in map(str, frame.columns):
        new, n = name, 1
        while new in seen:
            n += 1
            new = f"{name}_{n}"
        seen.add(new)
        names.append(new)
        if new != name:
            renamed.append((name, new))
    if renamed:
        frame = frame.set_axis(names, axis=1)
    return frame, renamed


def _dates_as_text(frame: Any) -> Any:
    """A SQL DATE (Python ``date``, not ``datetime``) as ``2026-12-01``, never as a midnight timestamp."""
    from datetime import date, datetime

    def is_date(value: Any) -> bool:
        return isinstance(value, date) and not isinstance(value, datetime)

    for i in range(len(frame.columns)):
        column = frame.iloc[:, i]
        if column.dtype == object and any(is_date(v) for v in column.dropna()):
            frame = frame.copy()
            frame.isetitem(i, column.map(lambda v: v.isoformat() if is_date(v) else v))
    return frame


def write_frame(frame: Any, fmt: str, out: Path | None) -> None:
    """``text``: the table as printed, NULL as ``NULL``; ``csv``: a header line, then one line a row (empty for
    NULL); ``json``: an array of objects (NULL, NaN and infinities as null: strict JSON; times in ISO 8601, a DATE
    as ``YYYY-MM-DD``); ``parquet``: a Parquet file (pyarrow), column types kept. To ``out`` (written whole, then
    moved into place), else to stdout."""
    if fmt == "parquet":
        assert out is not None
        _replace(out, lambda tmp: frame.to_parquet(tmp, index=False))
        return
    frame = _dates_as_text(frame)
    if fmt == "csv":
        text = frame.to_csv(index=False)
    elif fmt == "json":
        text = frame.to_json(orient="records", date_format="iso", force_ascii=False) + "\n"
    else:
        shown = frame.astype(object).where(frame.notna(), "NULL")
        text = (shown.to_string(index=False) if len(frame) else "(no rows)") + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        _replace(out, lambda tmp: tmp.write_text(text))


def _replace(out: Path, write: Any) -> None:
    """Write a sibling temporary file, then rename it onto ``out``: a link put there meanwhile is replaced, never
    followed, and a reader never sees half a file."""
    import os
    import tempfile

    handle, name = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent if str(out.parent) else ".")
    os.close(handle)
    tmp = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # as a plain write would have made it, not mkstemp's 0600
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def cmd_airflow(args: argparse.Namespace) -> int:
    """``airflow ARGS`` in this process's environment once it points at this checkout (configure_airflow)."""
    configure_airflow()
    if args.arguments[:1] != ["db"]:  # the tables bench run would make, before a first connection lands there
        from airflow.utils.db import upgradedb

        print("bench airflow: this checkout's metadata DB, migrated if it needs it", file=sys.stderr, flush=True)
        upgradedb()
    airflow = Path(sys.executable).parent / "airflow"
    os.execv(str(airflow), [str(airflow), *args.arguments])  # noqa: S606 (replaces this process: airflow's exit code)


def cmd_compare(args: argparse.Namespace) -> int:
    from benchflow.analysis.compare import RATIO, Side, compare_runs
    from benchflow.warehouse import Warehouse

    configure_airflow()
    try:
        a, b = Side.parse(args.a), Side.parse(args.b)
        warehouse = Warehouse.from_airflow(read_only=True)
        outcome = compare_runs(warehouse, a, b, args.point, args.metric, args.include_noisy, args.across_datasets)
    except (ValueError, LookupError, FileNotFoundError) as exc:
        print(f"bench compare: {exc}", file=sys.stderr)
        return 1
    print(f"A: {outcome.a.describe()}")
    print(f"B: {outcome.b.describe()}")
    left_out = [(name, side.not_ok()) for name, side in (("A", outcome.a), ("B", outcome.b)) if side.not_ok()]
    if not outcome.rows:
        why = f"{a} and {b} share no point and metric"
        if left_out and not args.include_noisy:
            said = "; ".join(f"{name} left out {text}" for name, text in left_out)
            why += f" measured ok ({said}; --include-noisy compares them anyway)"
        print(f"bench compare: {why}", file=sys.stderr)
        return 1
    print(f"{b} against {a}: {RATIO}")
    if args.include_noisy:
        for name, text in left_out:
            print(f"warning: {name} compares rows that were not judged ok ({text}): their figures are not clean")
    for warning in outcome.warnings:
        print(f"warning: {warning}")
    for row in outcome.rows:
        left, right = (row.bracket.a, row.bracket.b) if row.bracket else (None, None)
        figures = f"A {_figure(row.a, row.a_values, left)} B {_figure(row.b, row.b_values, right)}"
        print(f"{row.point:<18} {row.metric:<20} {figures} {row.verdict(b)}")
    for line in _bottlenecks(warehouse, outcome.a, outcome.b):
        print(line)
    print(f"side by side, with charts: {_compare_url([args.a, args.b])}")
    return 0


def _bottlenecks(warehouse: Any, *sides: Any) -> list[str]:
    """Each side's bottleneck verdict at its highest load, and whether both name the same limiter."""
    from benchflow.analysis.bottleneck import headlines, same_limiter
    from benchflow.spec import DAG_PREFIX
    from benchflow.warehouse import queries

    found = []
    for name, side in zip("AB", sides, strict=True):
        rows = queries.bottlenecks(warehouse, DAG_PREFIX + side.side.campaign, side.run_id).to_dict("records")
        rows = [r for r in rows if side.side.config in (None, r.get("config"))]
        found.append((name, rows))
    lines = [f"{name} {line}" for name, rows in found for line in headlines(rows)]
    both = same_limiter(found[0][1], found[1][1])
    return lines + ([f"both {both}"] if both else [])


def _compare_url(sides: list[str]) -> str:
    """The Benchmarks view's comparison page of these sides: on the stack ``bench up`` runs, else the path on
    any api-server."""
    from benchflow.ui.compare_pages import href
    from benchtools.up import read_state

    state = read_state()
    base = str(state["url"]) if state else "<api-server>"
    return f"{base}/benchmarks/{href(sides)}"


def _figure(summary: Any, count: int, bracket: tuple[float, float | None] | None = None) -> str:
    """``1234 ± 12`` (the mean and half its 95 % interval), ``1234 (one value)``, ``16 in [16, 17)`` (a
    bracketed metric: its value and the other bound), or ``-`` (no value)."""
    if bracket is not None:
        value, bound = bracket
        top = "none found" if bound is None else f"{bound:g}"
        return f"{value:10.4g} (bracket {value:g} to {top})"
    if summary is None:
        return f"{'-':<21}"
    if summary.n < 2:
        return f"{summary.mean:10.4g} (one value)"
    return f"{summary.mean:10.4g} ± {(summary.ci_high - summary.mean):<8.3g}"


def cmd_migrate(args: argparse.Namespace) -> int:
    from benchflow.warehouse import Warehouse

    configure_airflow()
    quiet_short_secrets()
    warehouse = Warehouse.from_airflow()
    applied = warehouse.migrate()
    print(f"{warehouse.location}: {', '.join(applied) if applied else 'up to date'}")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from benchtools import up

    try:
        up.up(port=args.port, db=args.db)
    except RuntimeError as exc:
        print(f"bench up: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from benchtools import up

    up.down()
    return 0


def arg(*names: str, **options: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return names, options


# Every subcommand: name, function, help line, description, arguments.
SUBCOMMANDS: list[tuple[str, Callable[[argparse.Namespace], int], str, str, list[Any]]] = [
    (
        "validate",
        cmd_validate,
        "check campaign specs",
        "Check campaign specs.",
        [
            arg("specs", nargs="*", help="spec files (default: every spec in include/campaigns/)"),
        ],
    ),
    (
        "parse",
        cmd_parse,
        "print the tidy rows of a benchmark output as JSON lines",
        "Parse a benchmark output; exit 1 naming the line if it is malformed.",
        [
            arg("file"),
            arg("--kind", help="result kind (detected when not given)"),
            arg("--format", help="output format of the kind (detected when not given)"),
            arg("--marker", default="ALL_DONE", help="done marker line (default: ALL_DONE)"),
            arg("--spec", help="read the output as this campaign does (its parser, patterns and marker)"),
        ],
    ),
    (
        "run",
        cmd_run,
        "run a campaign through Airflow and print its rows",
        "Run one campaign through Airflow (dag.test) and print the loaded rows.",
        [
            arg("campaign", help="campaign name (include/campaigns/<name>.yaml) or a spec path"),
            arg("--conf", help="JSON conf for the run"),
            arg("-v", "--verbose", action="store_true", help="show Airflow's logs too (always in a file)"),
        ],
    ),
    (
        "search",
        cmd_search,
        "search a campaign's config space for the most load per GPU within its SLO",
        "Rank the configs of a campaign's config space (space: in its spec) by the load search's answer per GPU: "
        "cheap probes of every config, then finer ones only for those that may still be the best. Each probe is a "
        "bench run; the answer lands in the warehouse (config_searches, config_search_configs).",
        [
            arg("campaign", help="campaign name (include/campaigns/<name>.yaml) whose spec has a space"),
            arg("--conf", help='JSON: levels, max_probes, max_hours, reuse (e.g. {"max_probes": 20})'),
        ],
    ),
    (
        "tune",
        cmd_tune,
        "find the tile that makes one token count fastest",
        "Race the tiles of a campaign whose benchmark takes a tile (benchmark.args.tile): every tile once, "
        "then again only those the values cannot tell apart from the best. Each probe is a bench run; the answer "
        "lands in the warehouse (searches, search_keys). Exits 1 when no tile was measured.",
        [
            arg("campaign", help="campaign name (include/campaigns/<name>.yaml) whose benchmark takes a tile"),
            arg("--case", default="m=64", help="the token count to tune for, e.g. m=64"),
            arg("--conf", help="JSON: tiles, metric, repeats, max_samples, max_probes, max_hours"),
        ],
    ),
    (
        "bisect",
        cmd_bisect,
        "find the payload commit that made a campaign's case worse",
        "Bisect the payload commits between GOOD and BAD of a campaign with a git payload: confirm that bad is worse "
        "than good beyond noise, then probe the commits that split the suspect range. Each probe is a bench run; "
        "the answer lands in the warehouse (bisections, bisection_probes). Exits 1 when the bisection failed.",
        [
            arg("campaign", help="campaign name (include/campaigns/<name>.yaml) with a git payload"),
            arg("--case", required=True, help="the regressed case as the warehouse names it, e.g. m=64"),
            arg("--metric", required=True, help="the trend metric that regressed, e.g. us_per_token"),
            arg("--good", required=True, help="a commit (or ref) of the payload that measured well"),
            arg("--bad", required=True, help="a later commit (or ref) that measured worse"),
            arg("--conf", help="JSON: repeats, max_samples, min_change, max_probes, max_hours, probe_conf"),
        ],
    ),
    (
        "sql",
        cmd_sql,
        "query the results warehouse (read-only)",
        "Run one read statement (SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW, DESCRIBE) against the results "
        "warehouse, where it cannot write: DuckDB's published snapshot, or a read-only PostgreSQL transaction.",
        [
            arg("query", help='one read statement, e.g. "SELECT * FROM runs ORDER BY started_at DESC LIMIT 5"'),
            arg(
                "--format",
                choices=SQL_FORMATS,
                default="text",
                help="text (default), csv, json (an array of objects) or parquet (needs --out)",
            ),
            arg("--out", metavar="FILE", help="write the result to FILE instead of stdout (never through a link)"),
            arg(
                "--timeout",
                type=float,
                default=300.0,
                metavar="SECONDS",
                help="cancel the statement after this long (default 300)",
            ),
        ],
    ),
    (
        "compare",
        cmd_compare,
        "compare two configs, runs or nights",
        "Compare side B with side A at every point both have (a concurrency, an M): the ratio of their geometric "
        "means with its "
        "95 % interval (Welch's t on the logs over the repeats) and whether the difference is real. A side is "
        "CAMPAIGN[:CONFIG][@RUN_ID or @YYYY-MM-DD]; without @, the latest valid run. A side stands for one run and "
        "one config: a campaign with several configs needs :CONFIG, a night with several valid runs needs @RUN_ID, "
        "and each is refused naming the choices. The runs compared are printed, points in numeric order, and a "
        "warning for each point whose settings (prompts, lengths) differ. B/A is the ratio of the geometric means. "
        "Rows not measured ok (noisy, throttled, contended) are left out and counted unless --include-noisy; a load "
        "search's answer is compared by its bracket (highest load passed, lowest failed).",
        [
            arg("a", help="the reference, e.g. serving_tp4 or serving_local:single"),
            arg("b", help="the other side, e.g. serving_pd or serving_local:pd@2026-11-28"),
            arg("--point", help="one point only, e.g. concurrency=16, request_rate=4 or m=256"),
            arg("--metric", help="one metric only, e.g. output_throughput"),
            arg(
                "--include-noisy",
                action="store_true",
                help="compare rows measured noisy, throttled or contended too (left out by default, and counted)",
            ),
            arg(
                "--across-datasets",
                action="store_true",
                help="compare runs measured on different datasets (refused by default: different work), with a warning",
            ),
        ],
    ),
    (
        "migrate",
        cmd_migrate,
        "create or update the warehouse schema",
        "Apply pending warehouse migrations and rebuild changed views.",
        [],
    ),
    ("pools", cmd_pools, "create the host pools", "Create the one-slot Airflow pool of every spec's host.", []),
    (
        "up",
        cmd_up,
        "start Airflow for this project on this machine (no Docker)",
        "Start the api-server, scheduler, dag-processor and triggerer (LocalExecutor) for this project, create the "
        "pools and the warehouse schema, print the URL and the login.",
        [
            arg("--port", type=int, help="the UI's port (default 8080, or BENCH_UP_PORT)"),
            arg(
                "--db",
                help="metadata DB: postgres, sqlite or a SQLAlchemy URI (default: the local PostgreSQL if it "
                "answers, else SQLite)",
            ),
        ],
    ),
    ("down", cmd_down, "stop what bench up started", "Stop what bench up started.", []),
    (
        "airflow",
        cmd_airflow,
        "Airflow's own CLI, on this checkout's metadata DB",
        "Run Airflow's CLI with this checkout's Airflow home, metadata database, DAGs and plugins (the ones bench run "
        "and bench up use), e.g. bench airflow connections add gpu_node_1 --conn-json '{...}'. A bare `airflow` "
        "without them writes to a database of its own that no bench command reads.",
        [arg("arguments", nargs=argparse.REMAINDER, help="what to pass to airflow, e.g. connections list")],
    ),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_line, description, arguments in SUBCOMMANDS:
        command = sub.add_parser(name, help=help_line, description=description)
        for names, options in arguments:
            command.add_argument(*names, **options)
        command.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
