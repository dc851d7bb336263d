from __future__ import annotations

import pytest

from benchflow import kinds
from benchflow.params import overlay, param_schemas, server_args

pytestmark = pytest.mark.unit
KERNEL = kinds.get("kernel").form
SERVING = kinds.get("serving").form


def test_schemas_have_types_ranges_and_enums():
    schemas = param_schemas({"m_list": [1, 2], "dtype": "bf16", "warmup": 3, "label": "x"}, True, KERNEL)
    assert schemas["m_list"][1]["items"]["minimum"] == 1 and schemas["m_list"][0] == [1, 2]
    assert schemas["dtype"][1]["enum"] == ["bf16", "fp16", "fp32", "fp8"]
    assert schemas["warmup"][1]["type"] == "integer"
    assert schemas["server_args"][0] == ""
    assert "server_args" not in param_schemas({"m_list": [1]}, False, KERNEL)


def test_overlay_takes_valid_values_and_ignores_unknown_names():
    args = {"m_list": [1, 2, 4], "dtype": "bf16"}
    assert overlay(args, {"m_list": [8], "other": 1}) == {"m_list": [8], "dtype": "bf16"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"m_list": [0]}, "less than the minimum"),
        ({"m_list": []}, "should be non-empty"),
        ({"dtype": "int3"}, "is not one of"),
        ({"note": "; rm -rf ~"}, "does not match"),
        ({"note": "$(id)"}, "does not match"),
    ],
)
def test_overlay_rejects_values_outside_their_schema(params, message):
    with pytest.raises(ValueError, match=message):
        overlay({"m_list": [1], "dtype": "bf16", "note": "x"}, params, KERNEL)


def test_server_args_are_checked_and_quoted():
    assert server_args({"server_args": "--mem-fraction-static 0.8 --chunked-prefill-size=4096"}) == (
        "--mem-fraction-static 0.8 --chunked-prefill-size=4096"
    )
    assert server_args({}) == ""
    for bad in ("--x; reboot", "--x `id`", "--x $(id)", "a\nb"):
        with pytest.raises(ValueError, match="may hold only"):
            server_args({"server_args": bad})


def test_a_misspelt_param_is_refused_naming_it_and_the_known_ones():
    from benchflow.params import check_conf

    with pytest.raises(ValueError, match=r"unknown param\(s\) 'm_lsit'; this campaign takes dtype, m_list"):
        check_conf({"m_list": [1, 2], "dtype": "bf16"}, False, {"m_list": [1, 2], "m_lsit": [4]})
    check_conf({"m_list": [1, 2]}, True, {"m_list": [4], "server_args": "--tp 2"})  # server_args: serving only
    with pytest.raises(ValueError, match="unknown param"):
        check_conf({"m_list": [1, 2]}, False, {"server_args": "--tp 2"})


def test_a_command_line_too_long_for_the_shell_is_refused_before_anything_runs():
    from benchflow.params import check_conf

    args = {f"names_{i}": ["a"] for i in range(4)}
    huge = {name: ["x" * 200] * 256 for name in args}  # each list fits its schema; together they do not fit
    with pytest.raises(ValueError, match=r"command line of \d+ characters \(at most 65536\)"):
        check_conf(args, False, huge)


def test_every_field_has_a_title_a_description_with_its_unit_and_a_section():
    from benchflow.params import SECTIONS

    args = {"warmup": 3, "m_list": [1, 2], "dtype": "bf16", "label": "x", "window_ms": 5.0, "concurrency": [1]}
    schemas = param_schemas(args, True, {**KERNEL, **SERVING})
    for name, (_, schema) in schemas.items():
        assert schema["title"] and "Unit: " in schema["description"], name
        assert schema["section"] in SECTIONS, name
    sections = [schema["section"] for _, schema in schemas.values()]
    assert sections == sorted(sections, key=SECTIONS.index)  # sweep, then server, then run options
    assert schemas["m_list"][1]["section"] == "Sweep" and schemas["server_args"][1]["section"] == "Server"
    assert "Unit: milliseconds" in schemas["window_ms"][1]["description"]
