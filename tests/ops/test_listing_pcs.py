"""`fmctl list`'s look for a PCS cluster: a region without PCS (no endpoint answers) or
credentials without it is "no PCS cluster", not a failure; anything else is raised."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from provisioner.ops.listing import pcs_state
from tests.resources.recorded import RecordedAws


class _Unreachable:
    """A PCS client whose endpoint does not answer, as botocore reports it."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def get_paginator(self, name: str) -> Any:
        raise self.error


class _Aws:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def client(self, service: str) -> Any:
        return _Unreachable(self.error)


def test_a_region_without_pcs_has_no_pcs_cluster() -> None:
    unreachable = EndpointConnectionError(endpoint_url="https://pcs.ca-central-1.amazonaws.com/")
    assert pcs_state(_Aws(unreachable), "c1") is None  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        pcs_state(_Aws(RuntimeError("a bug")), "c1")  # type: ignore[arg-type]


def test_credentials_without_pcs_and_a_listed_cluster() -> None:
    denied = RecordedAws("us-east-1")
    denied.fail("pcs", "ListClusters", "AccessDeniedException", 403)
    assert pcs_state(denied, "c1") is None  # type: ignore[arg-type]
    found = RecordedAws("us-east-1")
    cluster = {
        "name": "c1",
        "id": "pcs_abc123",
        "arn": "arn:aws:pcs:us-east-1:123456789012:cluster/pcs_abc123",
        "createdAt": "2026-12-05T00:00:00Z",
        "modifiedAt": "2026-12-05T00:00:00Z",
        "status": "ACTIVE",
    }
    found.answer("pcs", "ListClusters", {"clusters": [cluster]})
    found.answer("pcs", "ListTagsForResource", {"tags": {"fmctl.dev/cluster": "c1"}})
    assert pcs_state(found, "c1") == "ACTIVE"  # type: ignore[arg-type]
