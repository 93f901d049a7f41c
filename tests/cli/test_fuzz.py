"""Property-based: whatever the input, `fmctl validate` exits 0 or 1 with a located message.

Runs the click command in-process (the same code as the console script) so hypothesis can
try hundreds of inputs; a traceback or any exit status besides 0 and 1 fails the test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner.cli.main import cli
from tests.conftest import EXAMPLES

LOCATED = re.compile(r"^\S.*:\d+:\d+: (error|warning): ", re.M)
EXAMPLE_DATA = [yaml.safe_load(p.read_text()) for p in EXAMPLES]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**12),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.sampled_from(
        ["on-demand", "cr-0123", "1.33", "p5.48xlarge", "s3://b/p", "0.0.0.0/0", "yes", "~", "*"]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def _run(tmp: Path, content: bytes) -> None:
    path = tmp / "spec.yaml"
    path.write_bytes(content)
    result = CliRunner().invoke(cli, ["validate", "-f", str(path)])
    output = result.output
    assert result.exit_code in (0, 1), (result.exit_code, output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert "Traceback" not in output
    if result.exit_code == 1:
        assert LOCATED.search(output), output
    else:
        assert "valid" in output


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _paths(value, (*prefix, i))
    return out


def _mutate(data: Any, path: tuple[Any, ...], action: str, value: Any) -> Any:
    if not path:
        return value
    import copy

    out = copy.deepcopy(data)
    node = out
    for part in path[:-1]:
        node = node[part]
    last = path[-1]
    if action == "delete" and isinstance(node, dict):
        del node[last]
    elif action == "add-key" and isinstance(node[last], dict):
        node[last][f"x{abs(hash(str(value))) % 97}"] = value
    else:
        node[last] = value
    return out


SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(data=values)
def test_random_yaml(tmp_path: Path, data: Any) -> None:
    _run(tmp_path, yaml.safe_dump(data).encode())


@SETTINGS
@given(raw=st.binary(max_size=300))
def test_random_bytes(tmp_path: Path, raw: bytes) -> None:
    _run(tmp_path, raw)


@SETTINGS
@given(text=st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#\t\n ,?%@`0")), max_size=80))
def test_random_yaml_punctuation(tmp_path: Path, text: str) -> None:
    _run(tmp_path, text.encode())


@SETTINGS
@given(st.data())
def test_mutated_examples(tmp_path: Path, data: st.DataObject) -> None:
    example = data.draw(st.sampled_from(EXAMPLE_DATA))
    mutated = example
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(mutated)))
        action = data.draw(st.sampled_from(["replace", "delete", "add-key"]))
        mutated = _mutate(mutated, path, action, data.draw(values))
    _run(tmp_path, yaml.safe_dump(mutated, allow_unicode=True).encode())
