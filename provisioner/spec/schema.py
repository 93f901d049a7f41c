"""The spec's JSON Schema, generated from the model so the two cannot drift."""

from __future__ import annotations

from typing import Any

from provisioner import __version__
from provisioner.spec.model import ClusterSpec


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of ``fmctl.dev/v1alpha1`` ``Cluster``."""
    schema = ClusterSpec.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://fmctl.dev/schemas/v1alpha1/cluster.json",
        "title": f"fmctl Cluster (fmctl.dev/v1alpha1, fmctl {__version__})",
        **schema,
    }
