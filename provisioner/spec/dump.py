"""Writing a spec back out as YAML (``--show-defaults``), keys in the model's order."""

from __future__ import annotations

from provisioner.spec.model import ClusterSpec


def dump_spec_yaml(spec: ClusterSpec) -> str:
    """The spec as YAML with camelCase keys; unset optional values are left out."""
    import yaml

    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
