"""Which availability zone a starter spec names: one that offers the instance type, when
AWS (or the sandbox) can be asked; else the region's first zone, said to be unchecked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ZoneChoice:
    """The zone, and what the starter's comment says of it."""

    zone: str
    note: str


def starter_zone(
    region: str, instance_type: str, sandbox: bool, home: Path, ask: bool = True
) -> ZoneChoice:
    """The first zone of ``region`` that offers ``instance_type`` to this account
    (DescribeInstanceTypeOfferings), when there are credentials to ask with (or the
    sandbox); otherwise the region's first zone, noted as not checked."""
    from provisioner.catalog.regions import zones_of

    first = (zones_of(region) or (f"{region}a",))[0]
    if not ask:
        return ZoneChoice(first, "not checked (--offline): `fmctl plan` checks it")
    if not sandbox and not _credentials():
        return ZoneChoice(first, "not checked (no AWS credentials): `fmctl plan` checks it")
    try:
        offered = _ask(region, instance_type, sandbox, home)
    except Exception as exc:  # noqa: BLE001 - no answer to be had here: the spec is still written
        from provisioner.ops.errors import explain

        reason = explain(exc, "asking EC2")[0]
        return ZoneChoice(first, f"not checked ({reason}): `fmctl plan` checks it")
    if not offered:
        return ZoneChoice(
            first,
            f"no zone of {region} offers {instance_type} on demand to this account: a "
            "reservation or Capacity Block names its own zone",
        )
    return ZoneChoice(offered[0], f"offers {instance_type} (EC2's offerings, asked now)")


def _credentials() -> bool:
    """True when botocore finds credentials (environment, profile, SSO, instance role)."""
    import botocore.session
    from botocore.exceptions import BotoCoreError

    try:
        return botocore.session.get_session().get_credentials() is not None
    except BotoCoreError:  # a profile that does not exist, an SSO session expired
        return False


def _ask(region: str, instance_type: str, sandbox: bool, home: Path) -> list[str]:
    from provisioner.ops.target import target_for
    from provisioner.validate.online import zones_offering

    aws = target_for(region, home, sandbox).aws()
    aws.max_attempts = 2  # a starter spec is not worth a minute of retries
    return zones_offering(aws, instance_type)
