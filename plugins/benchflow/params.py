"""Trigger-form parameters: a manual run may override a campaign's benchmark arguments (and, for serving
campaigns, add server arguments), within JSON-schema types, ranges and enums. Airflow validates a
trigger's conf against them before the run exists; the launch validates again before anything reaches
a host, and every value is shell-quoted there."""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from typing import Any

_INT_LIST = {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "maxItems": 64}
KNOWN: dict[str, dict[str, Any]] = {
    "m_list": {**_INT_LIST, "items": {"type": "integer", "minimum": 1, "maximum": 65536},
               "description": "token counts M to sweep"},
    "concurrency": {**_INT_LIST, "items": {"type": "integer", "minimum": 1, "maximum": 4096},
                    "description": "client concurrency per phase"},
    "prompts": {**_INT_LIST, "items": {"type": "integer", "minimum": 1, "maximum": 100000},
                "description": "prompts per phase (one per concurrency level)"},
    "input_len": {"type": "integer", "minimum": 1, "maximum": 1048576, "description": "input tokens per prompt"},
    "output_len": {"type": "integer", "minimum": 1, "maximum": 1048576, "description": "output tokens per prompt"},
    "dtype": {"type": "string", "enum": ["bf16", "fp16", "fp32", "fp8"], "description": "weights dtype"},
    "impl": {"type": "string", "enum": ["auto", "triton", "torch"], "description": "kernel implementation"},
    "client": {"type": "string", "enum": ["local", "sglang", "vllm"], "description": "benchmark client"},
}  # fmt: skip
SAFE_TEXT = r"^[A-Za-z0-9 _=.,:/+@-]*$"
SERVER_ARGS = "server_args"


def schema_for(name: str, default: Any) -> dict[str, Any]:
    if name in KNOWN:
        return KNOWN[name]
    if isinstance(default, bool):
        return {"type": "boolean"}
    if isinstance(default, int):
        return {"type": "integer", "minimum": 0, "maximum": 10**9}
    if isinstance(default, float):
        return {"type": "number", "minimum": 0}
    if isinstance(default, list):
        return {"type": "array", "items": {"type": ["integer", "number", "string"], "maxLength": 200,
                                           "pattern": SAFE_TEXT}, "maxItems": 256}  # fmt: skip
    return {"type": "string", "pattern": SAFE_TEXT, "maxLength": 200}


def param_schemas(args: dict[str, Any], serving: bool) -> dict[str, tuple[Any, dict[str, Any]]]:
    """name → (default, JSON schema) for a campaign's trigger form."""
    schemas = {name: (value, schema_for(name, value)) for name, value in args.items()}
    if serving:
        schemas[SERVER_ARGS] = ("", {"type": "string", "pattern": SAFE_TEXT, "maxLength": 400,
                                     "description": "extra arguments appended to every server command"})  # fmt: skip
    return schemas


def overlay(args: dict[str, Any], params: dict[str, Any] | Any) -> dict[str, Any]:
    """The spec's arguments with a run's params on top, each checked against its schema."""
    merged = dict(args)
    for name, value in dict(params or {}).items():
        if name not in args:
            continue
        try:
            check_value(name, value, schema_for(name, args[name]))
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


def check_value(name: str, value: Any, schema: dict[str, Any]) -> None:
    """ValueError with the schema's message when ``value`` does not fit."""
    error = next(iter(_validator(json.dumps(schema, sort_keys=True)).iter_errors(value)), None)
    if error is not None:
        raise ValueError(error.message)


def check_defaults(args: dict[str, Any]) -> None:
    """Each spec argument against the schema its trigger-form field will have; ValueError names the first
    that does not fit (Airflow would refuse to build the DAG)."""
    for name, value in args.items():
        try:
            check_value(name, value, schema_for(name, value))
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


def check_conf(args: dict[str, Any], serving: bool, params: dict[str, Any] | Any) -> None:
    """Every param of a run against its schema, no param the campaign does not have, and a command line that
    fits; raises ValueError naming the first problem. Runs before anything irreversible (stopping services)."""
    from benchflow.remote.layout import render_args

    known = set(args) | ({SERVER_ARGS} if serving else set())
    unknown = sorted(set(dict(params or {})) - known)
    if unknown:
        raise ValueError(f"unknown param(s) {', '.join(map(repr, unknown))}; this campaign takes "
                         f"{', '.join(sorted(known)) or 'none'}")  # fmt: skip
    rendered = render_args(overlay(args, params))
    if serving:
        rendered += " " + server_args(params)
    if len(rendered) > MAX_ARGS_CHARS:
        raise ValueError(f"the arguments make a command line of {len(rendered)} characters (at most {MAX_ARGS_CHARS})")
