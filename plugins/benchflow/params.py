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
        return dict(form[name])
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
    return {**schema, **_describe(name, default)}


def param_schemas(
    args: dict[str, Any], serving: bool, form: Form | None = None
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """name → (default, JSON schema) for a campaign's trigger form, section by section (sweep, server, run
    options), each in the spec's order."""
    schemas = {name: (value, schema_for(name, value, form)) for name, value in args.items()}
    if serving:
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
    """ValueError with the schema's message when ``value`` does not fit."""
    error = next(iter(_validator(json.dumps(schema, sort_keys=True)).iter_errors(value)), None)
    if error is not None:
        raise ValueError(error.message)


def check_defaults(args: dict[str, Any], form: Form | None = None) -> None:
    """Each spec argument against the schema its trigger-form field will have; ValueError names the first
    that does not fit (Airflow would refuse to build the DAG)."""
    for name, value in args.items():
        try:
            check_value(value, schema_for(name, value, form))
        except ValueError as exc:
            raise ValueError(f"{name}: default {value!r} does not fit its trigger form: {exc}") from None


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


def run_option_schemas(
    git_ref: str | None, hosts: list[str], default_host: str
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """The trigger-form fields of a run that are not benchmark arguments: the git payload's ref (when the
    payload comes from git) and the host (when the campaign has several)."""
    options: dict[str, tuple[Any, dict[str, Any]]] = {}
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


def check_conf(
    args: dict[str, Any],
    serving: bool,
    params: dict[str, Any] | Any,
    form: Form | None = None,
    run_options: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """The run's benchmark arguments (the spec's with the params on top), once every param fits its schema, the
    campaign has each one, and the command line fits; ValueError names the first problem. Runs before anything
    irreversible (stopping services), and its result is what every later step of the run uses."""
    from benchflow.remote.layout import render_args

    known = set(args) | ({SERVER_ARGS} if serving else set()) | set(run_options)
    unknown = sorted(set(dict(params or {})) - known)
    if unknown:
        raise ValueError(
            f"unknown param(s) {', '.join(map(repr, unknown))}; this campaign takes "
            f"{', '.join(sorted(known)) or 'none'}"
        )
    resolved = overlay(args, params, form)
    rendered = render_args(resolved)
    if serving:
        rendered += " " + server_args(params)
    if len(rendered) > MAX_ARGS_CHARS:
        raise ValueError(f"the arguments make a command line of {len(rendered)} characters (at most {MAX_ARGS_CHARS})")
    return resolved
