"""The located YAML loader: positions, and every YAML hazard turned into a located problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.spec.problems import Position
from provisioner.spec.source import MAX_SPEC_BYTES, MAX_VALUES, load_source, parse_source

TEXT = """\
apiVersion: fmctl.dev/v1alpha1
metadata:
  name: x
compute:
  gpuPools:
    - name: a
      capacity: {type: spot, reservationId: cr-1}
"""


def test_positions_of_keys_and_values() -> None:
    doc, problems = parse_source(TEXT)
    assert problems == []
    assert doc.keys[("metadata", "name")] == Position(3, 3)
    assert doc.values[("metadata", "name")] == Position(3, 9)
    assert doc.values[("compute", "gpuPools", 0, "name")] == Position(6, 13)
    pos = doc.values[("compute", "gpuPools", 0, "capacity", "reservationId")]
    assert TEXT.splitlines()[pos.line - 1][pos.column - 1 :].startswith("cr-1")


def test_locate_falls_back_to_nearest_parent() -> None:
    doc, _ = parse_source(TEXT)
    assert doc.locate(("metadata", "region")) == doc.values[("metadata",)]
    assert doc.locate(("metadata", "region"), prefer_key=True) == doc.keys[("metadata",)]
    assert doc.locate(()) == Position(1, 1)


def _only(text: str) -> tuple[str, Position | None]:
    _, problems = parse_source(text)
    assert len(problems) == 1, problems
    return problems[0].code, problems[0].position


def test_duplicate_key_points_at_second() -> None:
    code, pos = _only("a: 1\nb: 2\na: 3\n")
    assert code == "yaml-duplicate-key"
    assert pos == Position(3, 1)


def test_tab_indentation() -> None:
    code, pos = _only("metadata:\n\tname: x\n")
    assert code == "yaml-syntax"
    assert pos is not None and pos.line == 2


def test_anchors_and_merge_keys_are_supported() -> None:
    doc, problems = parse_source(
        "base: &b {count: 2, name: a}\npool:\n  <<: *b\n  name: override\n"
    )
    assert problems == []
    assert doc.data["pool"] == {"count": 2, "name": "override"}


def test_merge_of_scalar_is_rejected() -> None:
    code, _ = _only("a: &x 1\nb:\n  <<: *x\n")
    assert code == "yaml-merge"


def test_alias_bomb_is_bounded() -> None:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    code, _ = _only("\n".join(lines) + "\n")
    assert code == "yaml-too-large"
    assert MAX_VALUES < 10**8


def test_recursive_alias() -> None:
    code, _ = _only("a: &a\n  b: *a\n")
    assert code == "yaml-recursive-alias"


def test_custom_tag() -> None:
    code, pos = _only("a: !!python/object:os.system ls\n")
    assert code == "yaml-tag"
    assert pos == Position(1, 4)


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    code, _ = _only("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert code == "yaml-too-deep"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", "empty"),
        ("   \n# only a comment\n", "empty"),
        ("- a\n- b\n", "not-a-mapping"),
        ("just words\n", "not-a-mapping"),
        ("a: 1\n---\nb: 2\n", "yaml-syntax"),
        ("a: [1, 2\n", "yaml-syntax"),
        ("? [a]\n: 1\n", "yaml-key"),
    ],
)
def test_shapes_that_are_not_specs(text: str, code: str) -> None:
    assert _only(text)[0] == code


def test_dates_stay_text() -> None:
    doc, problems = parse_source("metadata: {ttl: 2026-01-01}\n")
    assert problems == [] and doc.data["metadata"]["ttl"] == "2026-01-01"


def test_file_errors(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: 1\n" * (MAX_SPEC_BYTES // 5 + 10))
    _, problems = load_source(str(big))
    assert problems[0].code == "file-too-large"

    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"metadata:\n  name: caf\xe9\n")
    _, problems = load_source(str(latin))
    assert problems[0].code == "file-encoding"
    assert problems[0].position == Position(2, 12)

    loop = tmp_path / "loop.yaml"
    loop.symlink_to(tmp_path / "loop2.yaml")
    (tmp_path / "loop2.yaml").symlink_to(loop)
    _, problems = load_source(str(loop))
    assert problems[0].code == "file-unreadable"
    assert "symbolic links" in problems[0].message

    _, problems = load_source(str(tmp_path / "missing.yaml"))
    assert "no such file" in problems[0].message
    _, problems = load_source(str(tmp_path))
    assert "directory" in problems[0].message


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")
    doc, problems = load_source(str(path))
    assert problems == [] and doc.data == {"a": 1}
