"""Structural problems: unknown keys, wrong types, bad enum values, missing keys."""

from __future__ import annotations

from typing import Any

from tests.conftest import DELETE, set_path, validate_data

POOL = ("compute", "gpuPools", 0)


def _codes(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> list[tuple[str, str]]:
    result = validate_data(set_path(base, path, value))
    return [(p.code, p.dotted_path) for p in result.problems]


def test_unknown_key_with_did_you_mean(base: dict[str, Any]) -> None:
    result = validate_data(set_path(base, (*POOL, "efaa"), True))
    (problem,) = result.problems
    assert problem.code == "unknown-key"
    assert problem.dotted_path == "compute.gpuPools[0].efaa"
    assert problem.hint == "did you mean 'efa'?"


def test_unknown_key_lists_allowed_keys_when_nothing_is_close(base: dict[str, Any]) -> None:
    result = validate_data(set_path(base, ("network", "zzz"), 1))
    (problem,) = result.problems
    assert problem.hint and "availabilityZone" in problem.hint


def test_snake_case_is_not_accepted(base: dict[str, Any]) -> None:
    result = validate_data(set_path(base, ("network", "availability_zone"), "us-east-1a"))
    hints = [p.hint for p in result.problems if p.code == "unknown-key"]
    assert hints == ["did you mean 'availabilityZone'?"]


def test_quoted_number_is_a_type_error(base: dict[str, Any]) -> None:
    result = validate_data(set_path(base, (*POOL, "count"), "16"))
    (problem,) = result.problems  # and no spurious "count is required"
    assert problem.code == "wrong-type"
    assert problem.hint == "write it without quotes"


def test_yaml_float_version_gets_quote_hint(base: dict[str, Any]) -> None:
    result = validate_data(set_path(base, ("kubernetes",), {"version": 1.30}))
    (problem,) = result.problems
    assert problem.code == "wrong-type" and problem.hint and "quote" in problem.hint


def test_bad_enum_with_suggestion(base: dict[str, Any]) -> None:
    result = validate_data(set_path(base, (*POOL, "capacity", "type"), "capacity_block"))
    problems = [p for p in result.problems if p.code == "bad-value"]
    assert problems[0].hint == "did you mean 'capacity-block'?"


def test_missing_required_keys(base: dict[str, Any]) -> None:
    assert ("missing-key", "metadata.region") in _codes(base, ("metadata", "region"), DELETE)
    assert ("missing-key", "apiVersion") in _codes(base, ("apiVersion",), DELETE)


def test_list_where_mapping_expected(base: dict[str, Any]) -> None:
    result = validate_data(set_path(base, ("network",), ["a"]))
    assert any(p.code == "wrong-type" and p.dotted_path == "network" for p in result.problems)


def test_rules_still_run_next_to_a_type_error(base: dict[str, Any]) -> None:
    data = set_path(base, (*POOL, "count"), "16")
    data = set_path(data, ("storage", "fsxLustre", "capacityGiB"), 5000)
    codes = {p.code for p in validate_data(data).problems}
    assert codes == {"wrong-type", "fsx-capacity"}


def test_findings_resting_on_a_dropped_value_are_suppressed(base: dict[str, Any]) -> None:
    # The bad capacity type falls back to on-demand, which would make the reservation id
    # look misplaced; that finding would be about fmctl's stand-in, not the user's spec.
    data = set_path(base, (*POOL, "capacity", "type"), "capacityblock")
    codes = [p.code for p in validate_data(data).problems]
    assert codes == ["bad-value"]


def test_problems_are_sorted_by_position(base: dict[str, Any]) -> None:
    data = set_path(base, ("storage", "fsxLustre", "capacityGiB"), 5000)
    data = set_path(data, ("metadata", "name"), "X")
    result = validate_data(data)
    lines = [result.position(p).line for p in result.problems]
    assert lines == sorted(lines) and len(lines) == 2
