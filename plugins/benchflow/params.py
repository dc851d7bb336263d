"""Trigger-form parameters: a manual run may override a campaign's benchmark arguments (and, for serving
campaigns, add server arguments), within JSON-schema types, ranges and enums. Airflow validates a
trigger's conf against them before the run exists; the launch validates again before anything reaches
a host, and every value is shell-quoted there."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

# The trigger form's sections, in the order the form shows them (Airflow groups fields by ``section``).
SWEEP, SERVER, RUN = "Sweep", "Server", "Run options"
SECTIONS = (SWEEP, SERVER, RUN)
FORM_KEYS = ("title", "description", "section")  # what a field has beside its JSON schema
Form = Mapping[str, dict[str, Any]]  # a kind's fields: argument name → JSON schema with title, description, section
# Units of the arguments a payload commonly takes, for the generated fields: name → (title, unit, section).
GUESSED: dict[str, tuple[str, str, str]] = {
    "warmup": ("Warm-up iterations (calls)", "calls, not timed", RUN),
    "iters": ("Timed iterations (calls)", "calls, median taken", RUN),
    "rows": ("Rows (cases)", "cases", SWEEP),
    "delay": ("Delay (seconds)", "seconds", RUN),
    "seed": ("Random seed", "none", RUN),
}
SUFFIX_UNITS = (
    ("_ms", "milliseconds"),
    ("_us", "microseconds"),
    ("_s", "seconds"),
    ("_len", "tokens"),
    ("_tokens", "tokens"),
    ("_gb", "GB"),
    ("_mb", "MB"),
    ("_list", "as the payload reads it"),
)


def _describe(name: str, default: Any) -> dict[str, Any]:
    """Title, description with its unit, and section of a field the kind's form does not have."""
    flag = "--" + name.replace("_", "-")
    if name in GUESSED:
        title, unit, section = GUESSED[name]
    else:
        unit = next((u for suffix, u in SUFFIX_UNITS if name.endswith(suffix)), "as the payload reads it")
        title, section = name.replace("_", " ").capitalize(), RUN
        if unit != "as the payload reads it":
            title += f" ({unit})"
    return {
        "title": title,
        "description": f"Benchmark argument {flag} (the spec's default: {default!r}). Unit: {unit}.",
        "section": section,
    }


SAFE_TEXT = r"^[A-Za-z0-9 _=.,:/+@-]*$"
SERVER_ARGS = "server_args"


def schema_for(name: str, default: Any, form: Form | None = None) -> dict[str, Any]:
    """The JSON schema of a field: the kind's own (its ``form``) when it has one for ``name``, else one made from
    the default's type; with, for the form, a title, a description with the unit, and its section."""
    if form and name in form:
        return finite(dict(form[name]))
    if isinstance(default, bool):
        schema: dict[str, Any] = {"type": "boolean"}
    elif isinstance(default, int):
        schema = {"type": "integer", "minimum": 0, "maximum": 10**9}
    elif isinstance(default, float):
        schema = {"type": "number", "minimum": 0}
    elif isinstance(default, list):
        schema = {
            "type": "array",
            "items": {"type": ["integer", "number", "string"], "maxLength": 200, "pattern": SAFE_TEXT},
            "maxItems": 256,
        }
    else:
        schema = {"type": "string", "pattern": SAFE_TEXT, "maxLength": 200}
    return finite({**schema, **_describe(name, default)})


# JSON has no NaN or Infinity, but Python's reader takes them, and every comparison with NaN is false, so
# ``minimum`` and ``maximum`` let NaN through. A number that is at least 0 and below 0 at once is only NaN: a
# number field says "not that"; and its largest and smallest finite bounds refuse the infinities. Airflow checks
# these when a run is triggered (REST, UI or CLI), so such a conf never becomes a run.
NOT_NAN = {"not": {"type": "number", "minimum": 0, "exclusiveMaximum": 0}}
FLOAT_MAX = 1.7976931348623157e308


def finite(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (a trigger-form field's) with NaN and the infinities refused wherever it takes a number."""
    out = dict(schema)
    types = out.get("type")
    if "number" in (types if isinstance(types, list) else [types]):
        out.update(NOT_NAN)
        out.setdefault("maximum", FLOAT_MAX)
        out.setdefault("minimum", -FLOAT_MAX)
    if isinstance(out.get("items"), dict):
        out["items"] = finite(out["items"])
    return out


def param_schemas(
    args: dict[str, Any], with_servers: bool, form: Form | None = None
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """name → (default, JSON schema) for a campaign's trigger form, section by section (sweep, server, run
    options), each in the spec's order."""
    schemas = {name: (value, schema_for(name, value, form)) for name, value in args.items()}
    if with_servers:
        schemas[SERVER_ARGS] = (
            "",
            {
                "type": "string",
                "pattern": SAFE_TEXT,
                "maxLength": 400,
                "title": "Extra server arguments",
                "description": "Appended to every server command of every config, e.g. "
                "--mem-fraction-static 0.8. Unit: command-line words.",
                "section": SERVER,
            },
        )
    rank = {section: i for i, section in enumerate(SECTIONS)}
    return dict(sorted(schemas.items(), key=lambda item: rank.get(item[1][1].get("section", RUN), len(rank))))


def overlay(args: dict[str, Any], params: dict[str, Any] | Any, form: Form | None = None) -> dict[str, Any]:
    """The spec's arguments with a run's params on top, each checked against its schema."""
    merged = dict(args)
    for name, value in dict(params or {}).items():
        if name not in args:
            continue
        try:
            check_value(value, schema_for(name, args[name], form))
        except ValueError as exc:
            raise ValueError(f"param {name!r}: {exc}") from None
        merged[name] = value
    return merged


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    """A compiled validator per schema: ``jsonschema.validate`` checks the schema itself at every call, which
    is most of the cost of validating hundreds of specs at DAG-parse time."""
    import jsonschema

    schema = json.loads(schema_json)
    return jsonschema.validators.validator_for(schema)(schema)


def check_value(value: Any, schema: dict[str, Any]) -> None:
    """ValueError with the schema's message when ``value`` does not fit; the value it echoes is cut short."""
    error = next(iter(_validator(json.dumps(schema, sort_keys=True)).iter_errors(value)), None)
    if error is not None:
        message = error.message.replace(repr(error.instance), short(error.instance))
        where = "".join(f"[{part}]" for part in error.absolute_path)
        if non_finite(error.instance) is not None:  # what NOT_NAN and FLOAT_MAX mean, in words
            message = f"{error.instance!r} is not a finite number (NaN and Infinity are refused)"
        raise ValueError(f"item {where}: {message}" if where else message)


def short(value: Any, limit: int = 120) -> str:
    """``repr`` of a value cut to ``limit`` characters: an error never echoes a huge value whole."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 30]}… ({len(text)} characters)"


def non_finite(value: Any, where: str = "") -> str | None:
    """Where a NaN or an infinity is in a conf (``m_list[2]``, ``a.b``), at any depth; None when nowhere."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return where or "the value"
    if isinstance(value, dict):
        items: Any = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((found for path, item in items if (found := non_finite(item, path)) is not None), None)


def check_defaults(args: dict[str, Any], form: Form | None = None, paired: Pairs = ()) -> None:
    """Each spec argument against the schema its trigger-form field will have, and the lists that go together by
    position of the same length; ValueError names the first that does not fit (Airflow would refuse to build
    the DAG, or the run would fail on the host)."""
    for name, value in args.items():
        try:
            check_value(value, schema_for(name, value, form))
        except ValueError as exc:
            raise ValueError(f"{name}: default {short(value)} does not fit its trigger form: {exc}") from None
    check_pairs(args, args, paired)


Pairs = tuple[tuple[str, ...], ...]  # a kind's lists that go together by position, the leading one first


def check_pairs(spec_args: Mapping[str, Any], resolved: Mapping[str, Any], paired: Pairs) -> None:
    """Lists that go together by position (serving: the n-th ``prompts`` is for the n-th ``concurrency``): of the
    same length, and the leading one never changed alone (the spec's other lists would be paired, by position,
    with levels they were not written for). ValueError says what to write."""
    for group in paired:
        names = [n for n in group if isinstance(resolved.get(n), list)]
        if len(names) < 2:
            continue
        lead, others = names[0], names[1:]
        new = resolved[lead]
        kept = [n for n in others if new != spec_args.get(lead) and resolved[n] == spec_args.get(n)]
        if kept:
            old_pairs = dict(zip(spec_args.get(lead) or [], spec_args.get(kept[0]) or [], strict=False))
            example = [old_pairs.get(level, "?") for level in new]
            raise ValueError(
                f"{lead} was changed to {short(new)} and {' and '.join(kept)} left as the spec has it "
                f"({short(resolved[kept[0]])}), but they go together by position (the n-th {kept[0]} is for "
                f"the n-th {lead}): give {' and '.join(kept)} too, one value per {lead} value ({len(new)}), "
                f"e.g. {kept[0]} {json.dumps(example)}".replace('"?"', "?")
            )
        for other in others:
            if len(resolved[other]) != len(new):
                raise ValueError(
                    f"{lead} has {len(new)} values and {other} has {len(resolved[other])}, but they go together "
                    f"by position (the n-th {other} is for the n-th {lead}): give them the same length"
                )


def server_args(params: dict[str, Any] | Any) -> str:
    """Extra server arguments from a run's params, validated and quoted word by word ('' when none)."""
    import re

    text = str(dict(params or {}).get(SERVER_ARGS) or "")
    if not re.fullmatch(SAFE_TEXT, text) or len(text) > 400:
        raise ValueError(f"param {SERVER_ARGS!r} may hold only letters, digits, spaces and _=.,:/+@-")
    return " ".join(shlex.quote(word) for word in text.split())


MAX_ARGS_CHARS = 65536  # a shell word may hold 128 KiB (MAX_ARG_STRLEN); the launch must stay well inside


PAYLOAD_REF = "payload_ref"  # a git payload's ref for this run (a bisection probe's commit)
HOST = "host"  # which of a campaign's hosts this run goes to
CONFIGS = "configs"  # which of a campaign's configs this run measures (a config search's probe)
SEARCH = "search"  # a load search's probe settings for this run, over the spec's (a config search's round)
SEARCH_SETTINGS: dict[str, dict[str, Any]] = {
    "prompts_per_probe": {"type": "integer", "minimum": 1, "maximum": 100000},
    "precision": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "repeats": {"type": "integer", "minimum": 1, "maximum": 10},
}


def run_option_schemas(
    git_ref: str | None, hosts: list[str], default_host: str, configs: list[str] | None = None, search: bool = False
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """The trigger-form fields of a run that are not benchmark arguments: the git payload's ref (when the
    payload comes from git), the host (when the campaign has several), the configs to measure (when it has
    several) and the load search's probe settings (when it searches)."""
    options: dict[str, tuple[Any, dict[str, Any]]] = {}
    if configs and len(configs) > 1:
        options[CONFIGS] = (
            [],
            {
                "type": "array",
                "items": {"type": "string", "enum": list(configs)},
                "uniqueItems": True,
                "maxItems": len(configs),
                "title": "Configs",
                "description": "Which configs this run measures, in the spec's order; empty: all. Unit: names.",
                "section": RUN,
            },
        )
    if search:
        options[SEARCH] = (
            {},
            {
                "type": "object",
                "properties": SEARCH_SETTINGS,
                "additionalProperties": False,
                "title": "Load search settings",
                "description": "Over the spec's search: prompts_per_probe, precision, repeats; empty: the spec's. "
                "Unit: as the spec's fields.",
                "section": RUN,
            },
        )
    if git_ref is not None:
        options[PAYLOAD_REF] = (
            git_ref,
            {
                "type": "string",
                "pattern": r"^[A-Za-z0-9_][A-Za-z0-9._/@^~{}+-]{0,255}$",
                "title": "Payload ref",
                "description": "Branch, tag or commit of the payload's repository this run ships. Unit: a git ref.",
                "section": RUN,
            },
        )
    if len(hosts) > 1:
        options[HOST] = (
            default_host,
            {
                "type": "string",
                "enum": list(hosts),
                "title": "Host",
                "description": "Which of the campaign's hosts runs it. Unit: an Airflow connection id.",
                "section": RUN,
            },
        )
    return options


class ConfError(ValueError):
    """A DAG's conf that cannot be used (a bisection's, a config search's); the message starts with the field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"conf.{field}: {message}")


def check_fields(conf: dict[str, Any], fields: dict[str, tuple[Any, dict[str, Any]]], what: str) -> dict[str, Any]:
    """The conf with its defaults, each field against its schema; :class:`ConfError` names the first bad one (a
    field whose default is "" is required)."""
    unknown = sorted(set(conf) - set(fields))
    if unknown:
        raise ConfError(unknown[0], f"not a field of {what} (fields: {', '.join(fields)})")
    out = {}
    for name, (default, schema) in fields.items():
        value = conf.get(name, default)
        if value in ("", None) and default == "":
            raise ConfError(name, "required")
        try:
            check_value(value, {k: v for k, v in schema.items() if k not in FORM_KEYS})
        except ValueError as exc:
            raise ConfError(name, str(exc)) from None
        out[name] = value
    return out


def check_conf(
    args: dict[str, Any],
    with_servers: bool,
    params: dict[str, Any] | Any,
    form: Form | None = None,
    run_options: list[str] | tuple[str, ...] | Mapping[str, tuple[Any, dict[str, Any]]] = (),
    paired: Pairs = (),
) -> dict[str, Any]:
    """The run's benchmark arguments (the spec's with the params on top), once every param fits its schema, the
    campaign has each one, the lists that go together still do, and the command line fits; ValueError names
    the first problem. Runs before anything irreversible (stopping services), and its result is what every
    later step of the run uses."""

    if (where := non_finite(dict(params or {}))) is not None:
        raise ValueError(f"param {where}: NaN and Infinity are not numbers a benchmark can take")
    known = set(args) | ({SERVER_ARGS} if with_servers else set()) | set(run_options)
    unknown = sorted(set(dict(params or {})) - known)
    if unknown:
        raise ValueError(
            f"unknown param(s) {', '.join(map(repr, unknown))}; this campaign takes "
            f"{', '.join(sorted(known)) or 'none'}"
        )
    if isinstance(run_options, Mapping):  # with their schemas: each value given is checked against its own
        for name, (_, schema) in run_options.items():
            if name in dict(params or {}):
                try:
                    check_value(dict(params)[name], {k: v for k, v in schema.items() if k not in FORM_KEYS})
                except ValueError as exc:
                    raise ValueError(f"param {name!r}: {exc}") from None
    resolved = overlay(args, params, form)
    check_pairs(args, resolved, paired)
    from benchflow.remote.layout import render_args  # the SSH provider: the kinds and `bench sql` import no Airflow

    rendered = render_args(resolved)
    if with_servers:
        rendered += " " + server_args(params)
    if len(rendered) > MAX_ARGS_CHARS:
        raise ValueError(f"the arguments make a command line of {len(rendered)} characters (at most {MAX_ARGS_CHARS})")
    return resolved
