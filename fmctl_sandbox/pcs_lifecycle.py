"""A PCS compute node group's node lifecycle actions in the sandbox: the rules botocore's PCS
model documents for ``nodeLifecycleActions`` (CreateComputeNodeGroup and
UpdateComputeNodeGroup) beyond what its shapes say (patterns, enums and lengths are
``pcs_model.validate``'s).

Not documented, so not modelled: whether an update's actions replace the group's or merge
with them (the sandbox replaces: fmctl always sends every stage it wants, and ``{"stages":
{}}`` for none), and what PCS does with a script it cannot download or whose checksum does
not match (the sandbox runs no script on its instances).
"""

from __future__ import annotations

from typing import Any

from fmctl_sandbox.pcs_model import PcsError


def lifecycle_actions(actions: dict[str, Any] | None) -> None:
    """NodeLifecycleScript's documented rules: each script's name is "unique" (here: within
    its stage, the narrowest reading) of "letters, numbers, spaces, underscores, and hyphens"
    whose "first character must be a letter or a number" (the model's pattern is not
    anchored), and ``s3VersionId`` "is only valid when scriptLocation is an Amazon S3
    URI"."""
    import re

    if actions is None:
        return
    for stage, scripts in (actions.get("stages") or {}).items():
        seen: set[str] = set()
        for script in scripts or []:
            name = script["name"]
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 _-]*", name):
                raise PcsError(
                    "ValidationException",
                    f"nodeLifecycleActions.stages.{stage}: the script name {name!r} must be "
                    "letters, numbers, spaces, underscores and hyphens, the first a letter or "
                    "a number",
                )
            if name in seen:
                raise PcsError(
                    "ValidationException",
                    f"nodeLifecycleActions.stages.{stage}: the script name {name!r} is not unique",
                )
            seen.add(name)
            source = script["scriptSource"]
            if "s3VersionId" in source and not source["scriptLocation"].startswith("s3://"):
                raise PcsError(
                    "ValidationException",
                    f"nodeLifecycleActions.stages.{stage} {name!r}: s3VersionId is only valid "
                    "when scriptLocation is an Amazon S3 URI",
                )
