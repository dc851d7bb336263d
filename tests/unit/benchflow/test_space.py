"""A spec's config space: dimensions expanded into configs, derived values and constraints as small expressions,
values filled into the templates shell-quoted, every excluded combination with why, and a space that is empty,
too large or whose templates do not make configs refused naming the field."""

from __future__ import annotations

import shlex
import textwrap

import pytest

from benchflow import space
from benchflow.spec import SpecError, load_spec

pytestmark = pytest.mark.unit

SPEC = textwrap.dedent(
    """\
    description: a space
    kind: serving
    payload: serving
    schedule: null
    space:
      dimensions: {{gpus: [1, 2, 4], max_batch: [2, 4, 8]}}
      derived: {{last_gpu: "gpus - 1"}}
      constraints: {constraints}
      name: "g{{gpus}}_b{{max_batch}}"
      servers:
        - {{name: engine, command: "{{python}} server.py --max-batch {{max_batch}} --port {{port}}", port: 30150,
           gpus: "0-{{last_gpu}}"}}
    benchmark:
      script: sweep.py
      args: {{client: local, concurrency: [1], prompts: [4]}}
    """
)


def spec_at(tmp_path, constraints: str = '["gpus * max_batch <= 16"]', text: str | None = None):
    path = tmp_path / "spaced.yaml"
    path.write_text(text or SPEC.format(constraints=constraints))
    return load_spec(path)


def test_a_space_expands_into_configs_and_says_why_each_excluded_one_is_out(tmp_path):
    spec = spec_at(tmp_path)
    names = [c.name for c in spec.configs]
    assert names == ["g1_b2", "g1_b4", "g1_b8", "g2_b2", "g2_b4", "g2_b8", "g4_b2", "g4_b4"]
    g2 = spec.configs[names.index("g2_b8")].servers[0]
    assert g2.command == "{python} server.py --max-batch 8 --port {port}" and g2.visible_devices() == "0,1"
    assert {c.name: space.gpu_count(c) for c in spec.configs}["g4_b4"] == 4
    excluded = spec.space.expand().excluded
    assert [e.reason for e in excluded] == [
        "constraint 'gpus * max_batch <= 16' is false at gpus=4, max_batch=8, last_gpu=3"
    ]


@pytest.mark.parametrize(
    ("constraints", "field", "says"),
    [
        ('["gpus > 8"]', "space", "constraints: all 9 combinations are excluded"),
        ('["gpus.bit_length() > 1"]', "space.constraints", "Call is not allowed"),
        ("[\"__import__('os')\"]", "space.constraints", "Call is not allowed"),
        ('["tp * 2 <= 8"]', "space", "constraints[0]: 'tp * 2 <= 8' names ['tp']"),
        ('["gpus / 0 > 1"]', "space", "division by zero"),
    ],
)
def test_a_space_that_keeps_nothing_or_holds_what_is_not_arithmetic_is_refused_naming_the_field(
    tmp_path, constraints, field, says
):
    with pytest.raises(SpecError) as caught:
        spec_at(tmp_path, constraints)
    assert any(e.field == field and says in e.message for e in caught.value.errors), str(caught.value)


def test_a_space_over_the_limits_is_refused_naming_the_field(tmp_path):
    values = "[" + ", ".join(map(str, range(16))) + "]"
    huge = SPEC.format(constraints="[]").replace(
        "{gpus: [1, 2, 4], max_batch: [2, 4, 8]}", f"{{gpus: {values}, max_batch: {values}, c: {values[:-1]}, 99]}}"
    )
    with pytest.raises(SpecError, match=r"space: .*dimensions: 4352 combinations, over the limit of 4096"):
        spec_at(tmp_path, text=huge)
    with pytest.raises(SpecError, match="max_configs: the space keeps more than max_configs 4 configs"):
        spec_at(tmp_path, text=SPEC.format(constraints="[]").replace("  servers:", "  max_configs: 4\n  servers:"))


def test_a_value_reaches_the_shell_as_one_word_and_only_as_a_value(tmp_path):
    text = SPEC.format(constraints="[]").replace("max_batch: [2, 4, 8]", "max_batch: ['8; rm -rf /']")
    with pytest.raises(SpecError, match=r"space\.dimensions\.max_batch"):
        spec_at(tmp_path, text=text)
    word = SPEC.format(constraints="[]").replace("max_batch: [2, 4, 8]", "max_batch: ['a+b']")
    spec = spec_at(tmp_path, text=word.replace('"g{gpus}_b{max_batch}"', '"g{gpus}"'))
    assert shlex.split(spec.configs[0].servers[0].command)[3] == "a+b"
    unknown = SPEC.format(constraints="[]").replace("--port {port}", "--port {port} --x {nope}")
    with pytest.raises(SpecError, match=r"servers\[0\]\.command: \{nope\} is not a dimension or derived value"):
        spec_at(tmp_path, text=unknown)


def test_expressions_compute_arithmetic_and_comparisons_only():
    assert space.evaluate("tp * dp <= 8 and not (tp == 3)", {"tp": 2, "dp": 4}) is True
    assert space.evaluate("1 < x < 3", {"x": 2}) is True and space.evaluate("1 < x < 3", {"x": 3}) is False
    for text in ("x.real", "[x]", "x if x else 1", "lambda: 1", "x ** 99999999"):
        with pytest.raises(space.ExpressionError):
            space.evaluate(text, {"x": 2})


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        (("max_batch: [2, 4, 8]", "max_batch: ['--trust-remote-code']"), "space.dimensions.max_batch", "pattern"),
        (("max_batch: [2, 4, 8]", "max_batch: [2, 2.0]"), "space.dimensions", "distinct values"),
        (('"g{gpus}_b{max_batch}"', '"g{gpus}_{typo}"'), "space", "names ['typo']"),
        (('"g{gpus}_b{max_batch}"', '"ｇ{gpus}_b{max_batch}"'), "space", "only ASCII"),
        (('last_gpu: "gpus - 1"', 'last_gpu: "ｇｐｕｓ - 1"'), "space.derived", "only ASCII"),
        (('last_gpu: "gpus - 1"', "last_gpu: \"'x' * 1000000000\""), "space", "arithmetic on 'x', not a number"),
        (('last_gpu: "gpus - 1"', "last_gpu: \"'-' + 'x'\""), "space", "not a number"),
        (("concurrency: [1], prompts: [4]", "concurrency: [1, 1], prompts: [4, 4]"), "benchmark.args", "non-unique"),
    ],
)
def test_what_would_slip_into_a_command_or_a_run_is_refused_at_validate(tmp_path, change, field, says):
    """A flag as a value, one word written twice, a name the template does not know, letters that only look like
    ASCII, arithmetic on words (a GB per combination), a level swept twice: each refused naming its field."""
    text = SPEC.format(constraints="[]").replace(*change)
    assert text != SPEC.format(constraints="[]")
    with pytest.raises(SpecError) as caught:
        spec_at(tmp_path, text=text)
    assert any(e.field.startswith(field) and says in e.message for e in caught.value.errors), str(caught.value)


def test_a_space_whose_expansion_would_cost_too_much_is_refused_before_it_runs(tmp_path):
    """4,096 combinations times 32 long constraints, each within its own limits: refused by the steps expanding
    them would take, naming the fields, before any is evaluated."""
    values = "[" + ", ".join(map(str, range(64))) + "]"
    long = " + ".join(["gpus * max_batch"] * 8) + " >= 0"
    text = SPEC.format(constraints="[" + ", ".join([f'"{long}"'] * 32) + "]").replace(
        "{gpus: [1, 2, 4], max_batch: [2, 4, 8]}", f"{{gpus: {values}, max_batch: {values}}}"
    )
    with pytest.raises(
        SpecError, match=r"derived and constraints: 4096 combinations .* steps, over the limit of 1000000"
    ):
        spec_at(tmp_path, text=text)
