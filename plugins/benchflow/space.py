"""A serving campaign's config space (``space:`` in a spec): named dimensions over server settings, server templates
that the values fill, derived values and constraints as small expressions, expanded into the spec's configs.

    space:
      dimensions: {gpus: [1, 2, 4], max_batch: [2, 4, 6, 8]}
      derived: {last_gpu: "gpus - 1"}
      constraints: ["gpus * max_batch <= 16"]
      name: "g{gpus}_b{max_batch}"                     # optional: each dimension's name and value
      servers:
        - {name: engine, command: "{python} server.py --max-batch {max_batch} --port {port}", port: 30150,
           gpus: "0-{last_gpu}"}

Each combination of the dimensions' values is a config: ``derived`` values are computed from it, every
``constraints`` expression must hold (else the combination is excluded, and why is kept for ``bench validate``),
then every ``{name}`` of a dimension or derived value in the templates' text is filled (shell-quoted in a
command; ``{python}`` and ``{port}`` stay for the server's own placeholders) and the result is checked as any
config of a spec. Values are numbers, booleans or short words (letters, digits and ``_.:+-``), so nothing a
value holds can reach a shell as anything but one word, and no word starts with ``-`` (a flag). Expressions are
ASCII arithmetic over numbers, comparisons and ``and``/``or``/``not`` over the names, nothing else (no calls, no
attributes, no arithmetic on words). A space of more than :data:`MAX_COMBINATIONS` combinations, whose expressions
would cost more than :data:`MAX_STEPS` steps to expand, whose name template names an unknown value, whose values
write one word twice (``1`` and ``1.0``), or whose kept configs are none or more than ``max_configs``, is refused
naming the field.
"""

from __future__ import annotations

import ast
import functools
import itertools
import math
import operator
import re
import shlex
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StringConstraints, field_validator, model_validator

MAX_COMBINATIONS = 4096  # combinations of a space's dimensions, before its constraints
# what expanding a space may cost: its combinations times the nodes of its derived values' and constraints'
# expressions, each node one step of the evaluator (about half a second here at the limit, on a busy core)
MAX_STEPS = 1_000_000
Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,30}$")]
# a word never starts with "-": filled into a command, it would be read as a flag (--trust-remote-code)
Word = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:+][A-Za-z0-9_.:+-]{0,63}$")]
Value = bool | int | float | Word
Expr = Annotated[str, StringConstraints(min_length=1, max_length=200)]
RESERVED = ("python", "port")  # the server's own placeholders, filled when it launches
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ExpressionError(ValueError):
    pass


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


@functools.lru_cache(maxsize=512)
def parse_expression(text: str) -> ast.expr:
    """The expression's tree once it holds only what :func:`evaluate` computes; ExpressionError says what not."""
    if not text.isascii():  # Python reads full-width letters as ASCII names (NFKC): a name is written as it is
        raise ExpressionError(f"{text!r}: only ASCII characters (a name's letters are a-z)")
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise ExpressionError(f"{text!r} is not an expression: {exc.msg}") from None
    allowed: tuple[type[ast.AST], ...] = (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Name, ast.Constant)
    allowed += (ast.Load, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, *_BINARY, *_COMPARE)
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise ExpressionError(
                f"{text!r}: {type(node).__name__} is not allowed (arithmetic, comparisons, and/or/not)"
            )
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | str):
            raise ExpressionError(f"{text!r}: the constant {node.value!r} is not a number or a word")
    return tree


def names_in(text: str) -> set[str]:
    return {node.id for node in ast.walk(parse_expression(text)) if isinstance(node, ast.Name)}


def evaluate(text: str, values: dict[str, Any]) -> Any:
    """The expression's value over ``values``; ExpressionError for a name it does not know or a bad operation."""
    return _eval(parse_expression(text), values, text)


def _eval(node: ast.expr, values: dict[str, Any], text: str) -> Any:
    try:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in values:
                raise ExpressionError(f"{text!r}: no dimension or derived value {node.id!r}")
            return values[node.id]
        if isinstance(node, ast.BinOp):
            left, right = _number(_eval(node.left, values, text), text), _number(_eval(node.right, values, text), text)
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            operand = _eval(node.operand, values, text)
            if not isinstance(node.op, ast.Not):
                operand = _number(operand, text)
            return (
                not operand if isinstance(node.op, ast.Not) else -operand if isinstance(node.op, ast.USub) else operand
            )
        if isinstance(node, ast.BoolOp):
            results = (_eval(v, values, text) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.Compare):
            left = _eval(node.left, values, text)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = _eval(right_node, values, text)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
    except (TypeError, ZeroDivisionError, OverflowError) as exc:
        raise ExpressionError(f"{text!r}: {exc}") from None
    raise ExpressionError(f"{text!r}: cannot evaluate {type(node).__name__}")  # parse_expression allowed it


def _number(value: Any, text: str) -> int | float:
    """An operand of arithmetic: a number, never a word or a boolean (``'x' * 1000000000`` would allocate a GB)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExpressionError(f"{text!r}: arithmetic on {value!r}, not a number")
    return value


def steps(text: str) -> int:
    """The nodes of an expression: what evaluating it once costs."""
    return sum(1 for _ in ast.walk(parse_expression(text)))


@dataclass(frozen=True)
class Excluded:
    values: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class Expansion:
    """The kept configs (as config data: name, servers, router; :mod:`benchflow.spec` checks them as configs),
    with the values that made each, and the excluded combinations, with why."""

    configs: list[dict[str, Any]]
    values: dict[str, dict[str, Any]]  # config name → its dimensions' and derived values
    excluded: list[Excluded]


class ConfigSpace(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dimensions: dict[Name, list[Value]] = Field(min_length=1, max_length=16)
    derived: dict[Name, Expr] = Field(default_factory=dict, max_length=32)
    constraints: list[Expr] = Field(default_factory=list, max_length=32)
    name: Annotated[str, StringConstraints(max_length=120)] = Field(
        default="", description="the configs' names, e.g. 'tp{tp}_b{max_batch}'; default: each dimension and value"
    )
    servers: list[dict[str, Any]] = Field(min_length=1, max_length=32, description="server templates")
    router: dict[str, Any] | None = None
    max_configs: int = Field(default=32, ge=1, le=64, description="kept configs at most (each is a task group)")
    price: dict[Annotated[str, StringConstraints(pattern=r"^(gpu_hour|kwh)$")], float] = Field(
        default_factory=dict, description="cost of a GPU-hour and of a kWh, for the cost per token of the answer"
    )
    _expansion: Expansion | None = PrivateAttr(default=None)

    @field_validator("dimensions")
    @classmethod
    def _values(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for name, values in value.items():
            if name in RESERVED:
                raise ValueError(f"{name!r} is the server's own placeholder: name the dimension otherwise")
            if not 1 <= len(values) <= 64 or len({_word(v) for v in values}) != len(values):  # 1 and 1.0: one
                raise ValueError(f"{name}: 1 to 64 distinct values (as a command writes them), got {values}")
        return value

    @field_validator("derived", "constraints")
    @classmethod
    def _expressions(cls, value: Any) -> Any:
        for text in value.values() if isinstance(value, dict) else value:
            parse_expression(text)
        return value

    @model_validator(mode="after")
    def _known_names(self) -> ConfigSpace:
        known = set(self.dimensions)
        for name, text in self.derived.items():  # in order: each may use the dimensions and the ones before it
            if name in known or name in RESERVED:
                raise ValueError(f"derived.{name}: the name is taken")
            if unknown := names_in(text) - known:
                raise ValueError(f"derived.{name}: {text!r} names {sorted(unknown)}, not a dimension or earlier value")
            known.add(name)
        for i, text in enumerate(self.constraints):
            if unknown := names_in(text) - known:
                raise ValueError(f"constraints[{i}]: {text!r} names {sorted(unknown)}, not a dimension or derived")
        if not self.name.isascii():
            raise ValueError(f"name: {self.name!r}: only ASCII characters (a name's letters are a-z)")
        if unknown := set(_PLACEHOLDER.findall(self.name)) - known:
            raise ValueError(f"name: {self.name!r} names {sorted(unknown)}, not a dimension or derived value")
        if (combinations := self.combinations()) > MAX_COMBINATIONS:
            raise ValueError(
                f"dimensions: {combinations} combinations, over the limit of {MAX_COMBINATIONS}: fewer values"
            )
        cost = combinations * sum(steps(text) for text in [*self.derived.values(), *self.constraints])
        if cost > MAX_STEPS:
            raise ValueError(
                f"derived and constraints: {combinations} combinations × their expressions' {cost // combinations} "
                f"nodes is {cost} steps, over the limit of {MAX_STEPS}: fewer values or shorter expressions"
            )
        self._expansion = self._expand()  # refused here, naming the field, when it keeps none or too many
        return self

    def combinations(self) -> int:
        return math.prod(len(values) for values in self.dimensions.values())

    def expand(self) -> Expansion:
        """Every combination, kept (a config) or excluded (why), as validation expanded them."""
        if self._expansion is None:
            self._expansion = self._expand()
        return self._expansion

    def _expand(self) -> Expansion:
        """ValueError naming the field for a space that keeps none or more than ``max_configs``."""
        configs: list[dict[str, Any]] = []
        kept: dict[str, dict[str, Any]] = {}
        excluded: list[Excluded] = []
        names = list(self.dimensions)
        for combination in itertools.product(*self.dimensions.values()):
            values = self._values_of(dict(zip(names, combination, strict=True)))
            reason = self._excluded_by(values)
            if reason:
                excluded.append(Excluded(values, reason))
                continue
            name = self._name_of(values)
            if name in kept:
                raise ValueError(f"name: {self.name or 'the default name'} gives {name!r} to two configs")
            if len(kept) == self.max_configs:  # one more than allowed: no need to fill the rest
                raise ValueError(
                    f"max_configs: the space keeps more than max_configs {self.max_configs} configs: "
                    "fewer values, a constraint, or a larger max_configs (at most 64)"
                )
            data: dict[str, Any] = {
                "name": name,
                "servers": [self._fill(s, values, f"servers[{i}]") for i, s in enumerate(self.servers)],
            }
            if self.router is not None:
                data["router"] = self._fill(self.router, values, "router")
            configs.append(data)
            kept[name] = values
        if not configs:
            first = excluded[0].reason if excluded else "no combination"
            raise ValueError(f"constraints: all {len(excluded)} combinations are excluded (the first: {first})")
        return Expansion(configs, kept, excluded)

    def _values_of(self, values: dict[str, Any]) -> dict[str, Any]:
        for name, text in self.derived.items():
            try:
                values[name] = evaluate(text, values)
            except ExpressionError as exc:
                raise ValueError(f"derived.{name}: {exc} (at {show(values)})") from None
            if isinstance(values[name], float) and not math.isfinite(values[name]):
                raise ValueError(f"derived.{name}: {text!r} is {values[name]} (at {show(values)}), not a number")
        return values

    def _excluded_by(self, values: dict[str, Any]) -> str:
        for i, text in enumerate(self.constraints):
            try:
                holds = evaluate(text, values)
            except ExpressionError as exc:
                raise ValueError(f"constraints[{i}]: {exc} (at {show(values)})") from None
            if not holds:
                return f"constraint {text!r} is false at {show(values)}"
        return ""

    def _name_of(self, values: dict[str, Any]) -> str:
        if self.name:
            text = _PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), self.name)
        else:
            text = "_".join(f"{k}{v}" for k, v in values.items() if k in self.dimensions)
        name = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_")
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,62}", name):
            raise ValueError(f"name: {text!r} is not a config name (a letter, then letters, digits and _)")
        return name

    def _fill(self, template: dict[str, Any], values: dict[str, Any], where: str) -> dict[str, Any]:
        """The template with every ``{name}`` of its text filled: shell-quoted in ``command``, as is elsewhere."""
        out = {}
        for key, text in template.items():
            if not isinstance(text, str):
                out[key] = text
                continue
            quote = shlex.quote if key == "command" else str

            def fill(match: re.Match[str], quote: Any = quote, key: str = key) -> str:
                name = match.group(1)
                if name in RESERVED and key == "command":
                    return match.group(0)
                if name not in values:
                    raise ValueError(f"{where}.{key}: {{{name}}} is not a dimension or derived value")
                word = _word(values[name])
                if word.startswith("-") and isinstance(values[name], str):  # a word read as a flag
                    raise ValueError(f"{where}.{key}: {{{name}}} is {word!r}, which a command reads as a flag")
                return str(quote(word))

            out[key] = _PLACEHOLDER.sub(fill, text)
        return out


def _word(value: Any) -> str:
    """A value as it is written in a command: integers without a decimal point (a derived 8 / 2 is 4)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).lower() if isinstance(value, bool) else str(value)


def show(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_word(v)}" for k, v in values.items())


def gpu_count(config: Any) -> int:
    """The distinct GPUs a config's servers and router declare (``gpus``); 1 when none declares any."""
    members = [*config.servers, *([config.router] if config.router else [])]
    devices = {d for m in members for d in (m.visible_devices() or "").split(",") if d}
    return max(len(devices), 1)
