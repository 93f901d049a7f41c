"""Every resource kind has unit tests of its verbs against recorded answers (issue 36): read,
diff, a create whose answer was lost, and delete (a kind fmctl only uses, like an existing
VPC: read). A test says what it covers with ``tests.resources.contract.covers``; the answers
are AWS's (``recorded.RecordedAws``, botocore's Stubber holding each to the service's model),
the Kubernetes API's (``recorded.RecordedKube``) or ParallelCluster's CLI's stand-in.

When the rule came in (2026-12-05) 113 verbs had no such test; the list of them shrank to
nothing on 2026-12-05, and a new kind now comes with its four tests or fails here."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

import tests.resources
from provisioner.resources.base import DataSource, Kind
from provisioner.resources.registry import kinds
from tests.resources.contract import COVERED, VERBS

READ_ONLY = ("read",)


def _load_every_test_module() -> None:
    for found in pkgutil.iter_modules(tests.resources.__path__):
        if found.name.startswith("test_"):
            importlib.import_module(f"tests.resources.{found.name}")


def uncovered(
    every: Mapping[str, Kind[Any, Any, Any]], covered: Mapping[str, set[str]]
) -> dict[str, list[str]]:
    """Kind -> the verbs of the contract no test covers."""
    missing = {}
    for name, kind in sorted(every.items()):
        untested = set(VERBS if kind.owned else READ_ONLY) - covered.get(name, set())
        if untested:
            missing[name] = sorted(untested)
    return missing


def test_every_kind_has_unit_tests_of_its_verbs() -> None:
    _load_every_test_module()
    every = kinds()
    assert set(COVERED) <= set(every), (
        f"tests cover kinds that do not exist: {set(COVERED) - set(every)}"
    )
    assert uncovered(every, COVERED) == {}, "kinds whose verbs have no unit test (tests/resources)"


def test_the_contract_sees_a_kind_without_tests_and_a_data_source_needs_only_read() -> None:
    class Untested(Kind[object, object, object]):
        name = "untested-kind"

    class Looked(DataSource[object, object]):
        name = "looked-up"

    every = {"untested-kind": Untested(), "looked-up": Looked()}
    assert uncovered(every, {"untested-kind": {"read", "diff"}}) == {
        "untested-kind": ["create-adopts", "delete"],
        "looked-up": ["read"],
    }
    assert uncovered(every, {"untested-kind": set(VERBS), "looked-up": {"read"}}) == {}
