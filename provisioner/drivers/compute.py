"""Security groups (EFA, FSx) and cluster placement groups."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

from provisioner.drivers.aws import error_code
from provisioner.drivers.ec2_base import Ec2Kind, retry_dependency
from provisioner.plan.context import Engine
from provisioner.plan.graph import Found, Node, Outputs

#: Lustre's ports: 988 and 1018-1023 (https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html)
LUSTRE_PORTS = ((988, 988), (1018, 1023))


class SecurityGroup(Ec2Kind):
    """``efa``: all traffic to and from itself, in and out (EFA needs both directions).
    ``fsx``: Lustre's ports from the EFA group (every node), and to itself."""

    name, after = "sg", ("vpc",)
    describe_call, result_key, id_field = "describe_security_groups", "SecurityGroups", "GroupId"

    def create(self, engine: Engine, node: Node) -> Outputs:
        ec2 = engine.aws.client("ec2")
        try:
            group = ec2.create_security_group(
                GroupName=f"{engine.cluster}-{node.params['role']}",
                Description=f"fmctl {engine.cluster}: {node.params['role']}",
                VpcId=engine.output(node.params["vpc"]),
                TagSpecifications=engine.tag_spec("security-group", node.id),
            )
        except Exception as exc:
            if error_code(exc) != "InvalidGroup.Duplicate":
                raise
            found = self.discover(engine, node)
            if found is None:
                raise
            return found
        group_id = group["GroupId"]
        if node.params["role"] != "efa":
            # A file system answers its clients and needs no way out to the world: drop the
            # default allow-all egress (the Lustre rules below are both ways).
            with contextlib.suppress(Exception):
                ec2.revoke_security_group_egress(
                    GroupId=group_id,
                    IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
                )
        self._rules(engine, node, group_id)
        return {"id": group_id}

    def _rules(self, engine: Engine, node: Node, group_id: str) -> int:
        """Authorize the group's rules; returns how many were missing."""
        ec2 = engine.aws.client("ec2")
        if node.params["role"] == "efa":
            self_ref = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]}]
            return _authorize(ec2.authorize_security_group_ingress, group_id, self_ref) + (
                _authorize(ec2.authorize_security_group_egress, group_id, self_ref)
            )
        else:
            clients = engine.output(node.params["clients"])
            rules = [
                {
                    "IpProtocol": "tcp",
                    "FromPort": a,
                    "ToPort": b,
                    "UserIdGroupPairs": [{"GroupId": g}],
                }
                for a, b in LUSTRE_PORTS
                for g in (clients, group_id)
            ]
            return _authorize(ec2.authorize_security_group_ingress, group_id, rules) + (
                _authorize(ec2.authorize_security_group_egress, group_id, rules)
            )

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        items = self._describe(engine, engine.owner_filters(node.id))
        if not items:
            return None
        # Idempotent: fills what a crashed run missed or a hand removed, and says so.
        restored = self._rules(engine, node, items[0]["GroupId"])
        if restored:
            engine.emit(
                node.id,
                "exists",
                f"{items[0]['GroupId']}: restored {restored} missing rule(s) (removed by hand, "
                "or a run stopped midway)",
            )
        return {"id": items[0]["GroupId"]}

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        # Rules referring to other groups block their deletion: empty this group first.
        for key, revoke in (
            ("IpPermissions", ec2.revoke_security_group_ingress),
            ("IpPermissionsEgress", ec2.revoke_security_group_egress),
        ):
            rules = [_plain(r) for r in found.data.get(key, []) if r.get("UserIdGroupPairs")]
            if rules:
                retry_dependency(
                    functools.partial(revoke, GroupId=found.id, IpPermissions=rules),
                    found.id,
                    engine,
                )
        retry_dependency(lambda: ec2.delete_security_group(GroupId=found.id), found.id, engine)


def _plain(rule: dict[str, Any]) -> dict[str, Any]:
    keep = ("IpProtocol", "FromPort", "ToPort")
    out = {k: rule[k] for k in keep if k in rule}
    out["UserIdGroupPairs"] = [{"GroupId": p["GroupId"]} for p in rule["UserIdGroupPairs"]]
    return out


def _authorize(call: Any, group_id: str, rules: list[dict[str, Any]]) -> int:
    """Authorize each rule; returns how many were not there already."""
    added = 0
    for rule in rules:
        try:
            call(GroupId=group_id, IpPermissions=[rule])
            added += 1
        except Exception as exc:
            if error_code(exc) != "InvalidPermission.Duplicate":
                raise
    return added


class PlacementGroup(Ec2Kind):
    """A cluster placement group for a GPU pool (one spine, lowest latency)."""

    name, after = "placement-group", ()
    describe_call, result_key, id_field, state_field = (
        "describe_placement_groups",
        "PlacementGroups",
        "GroupName",
        "State",
    )

    def create(self, engine: Engine, node: Node) -> Outputs:
        name = f"{engine.cluster}-{node.params['pool']}"
        try:
            engine.aws.client("ec2").create_placement_group(
                GroupName=name,
                Strategy="cluster",
                TagSpecifications=engine.tag_spec("placement-group", node.id),
            )
        except Exception as exc:
            if error_code(exc) != "InvalidPlacementGroup.Duplicate":
                raise
            if self.discover(engine, node) is None:  # same name, but not this cluster's
                raise RuntimeError(
                    f"a placement group named {name} exists and is not owned "
                    f"by fmctl cluster {engine.cluster}; rename the pool or "
                    "delete that group"
                ) from exc
        return {"id": name}

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        retry_dependency(lambda: ec2.delete_placement_group(GroupName=found.id), found.id, engine)
