"""A GPU pool's launch template: every EFA interface, IMDSv2, an encrypted root volume,
capacity-block market options and the node's user data; a change is a new version."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from provisioner.drivers.aws_errors import AlreadyExists, NotFound
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.render.placeholders import fill
from provisioner.resources.base import FieldChange, How, Kind, Observed, Owned, Request
from provisioner.resources.compute import PlacementGroupOut, SgOut
from provisioner.resources.context import Context
from provisioner.resources.ec2 import by_resource, owned_items, retag, tags_of
from provisioner.resources.errors import Foreign
from provisioner.resources.tags import CREATED_TAG, RESOURCE_TAG, DesiredTags, Tags

if TYPE_CHECKING:
    from types_boto3_ec2.type_defs import (
        RequestLaunchTemplateDataTypeDef,
        ResponseLaunchTemplateDataTypeDef,
    )


@dataclass(frozen=True)
class LtOut:
    """A launch template: its id and default version."""

    id: str
    version: int


@dataclass(frozen=True)
class Interface:
    """One network interface of the template (EC2's multi-card layout)."""

    card: int
    device: int
    interface_type: str
    groups: tuple[Ref[SgOut], ...]
    delete_on_termination: bool = True


@dataclass(frozen=True)
class Volume:
    """An EBS volume of the template."""

    device: str
    size_gib: int
    volume_type: str
    encrypted: bool
    delete_on_termination: bool = True


@dataclass(frozen=True)
class LtData:
    """LaunchTemplateData, as ``render`` writes it in aws/launch-templates/POOL.yaml."""

    instance_type: str
    http_tokens: str
    http_endpoint: str
    hop_limit: int
    volumes: tuple[Volume, ...]
    interfaces: tuple[Interface, ...]
    user_data: str
    market_type: str | None = None
    reservation_id: str | None = None
    placement_group: Ref[PlacementGroupOut] | None = None
    #: (resource type, tags) for what instances launched from it carry.
    instance_tags: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    #: Placeholders in ``user_data`` and what fills them: (name, resource, its output).
    fills: tuple[tuple[str, Ref[Any], str], ...] = ()


@dataclass(frozen=True)
class LtParams:
    """A GPU pool's launch template."""

    template_name: str
    data: LtData
    tags: DesiredTags


@dataclass(frozen=True)
class LtLive:
    """The default version's data, flattened to (path, value) leaves; and the tags."""

    data: tuple[tuple[str, Any], ...]
    tags: Tags


def launch_data(ctx: Context, data: LtData, encode: bool = True) -> dict[str, Any]:
    """The LaunchTemplateData request (ids resolved; ``UNKNOWN`` where not made yet)."""
    body: dict[str, Any] = {
        "InstanceType": data.instance_type,
        "MetadataOptions": {
            "HttpTokens": data.http_tokens,
            "HttpEndpoint": data.http_endpoint,
            "HttpPutResponseHopLimit": data.hop_limit,
        },
        "BlockDeviceMappings": [
            {
                "DeviceName": v.device,
                "Ebs": {
                    "VolumeSize": v.size_gib,
                    "VolumeType": v.volume_type,
                    "Encrypted": v.encrypted,
                    "DeleteOnTermination": v.delete_on_termination,
                },
            }
            for v in data.volumes
        ],
        "NetworkInterfaces": [
            {
                "NetworkCardIndex": i.card,
                "DeviceIndex": i.device,
                "InterfaceType": i.interface_type,
                "Groups": [ctx.resolve(g) for g in i.groups],
                "DeleteOnTermination": i.delete_on_termination,
            }
            for i in data.interfaces
        ],
    }
    if data.market_type:
        body["InstanceMarketOptions"] = {"MarketType": data.market_type}
    if data.reservation_id:
        body["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": data.reservation_id}
        }
    if data.placement_group is not None:
        body["Placement"] = {"GroupName": ctx.resolve(data.placement_group)}
    if data.instance_tags:
        body["TagSpecifications"] = [
            {"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags]}
            for kind, tags in data.instance_tags
        ]
    text = user_data(ctx, data)
    if text is UNKNOWN:
        body["UserData"] = UNKNOWN
    else:
        body["UserData"] = base64.b64encode(text.encode()).decode() if encode else text
    return body


def request_data(ctx: Context, data: LtData) -> RequestLaunchTemplateDataTypeDef:
    """``launch_data`` for the create calls, where every reference is resolved. Its body is
    built as a plain mapping because `plan` fills it with ``UNKNOWN`` too; LtData's fields are
    the spec's validated values (instance, volume and market types EC2 names)."""
    return cast("RequestLaunchTemplateDataTypeDef", launch_data(ctx, data))


def user_data(ctx: Context, data: LtData) -> Any:
    """The user data with its placeholders filled (``UNKNOWN`` until what fills one exists)."""
    if not data.fills:
        return data.user_data
    values = {name: ctx.resolve(ref, attribute) for name, ref, attribute in data.fills}
    if any(v is UNKNOWN for v in values.values()):
        return UNKNOWN
    return fill(data.user_data, {k: str(v) for k, v in values.items()})


def template_version(
    ctx: Context, lt_id: str, version: str
) -> ResponseLaunchTemplateDataTypeDef | None:
    """A launch template version's data (read once per run: the template and the node groups
    that run it ask for the same one)."""

    def load() -> ResponseLaunchTemplateDataTypeDef | None:
        found = ctx.aws.client("ec2").describe_launch_template_versions(
            LaunchTemplateId=lt_id, Versions=[version]
        )["LaunchTemplateVersions"]
        return found[0]["LaunchTemplateData"] if found else None

    return ctx.cached(f"ec2:lt:{lt_id}:{version}", load)


def flatten(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """(path, leaf) pairs of JSON-like data, e.g. ("NetworkInterfaces[1].DeviceIndex", 1)."""
    if isinstance(value, dict):
        out: list[tuple[str, Any]] = []
        for key in sorted(value):
            out += flatten(value[key], f"{path}.{key}" if path else key)
        return out
    if isinstance(value, list):
        out = []
        for index, item in enumerate(value):
            out += flatten(item, f"{path}[{index}]")
        return out
    return [(path, value)]


def _top(path: str) -> str:
    return path.split(".")[0].split("[")[0]


def _shown(leaves: dict[str, Any]) -> Any:
    """A setting's leaves for people: the value itself, or a count for a list."""
    if not leaves:
        return None
    if len(leaves) == 1:
        return next(iter(leaves.values()))
    items = {p.split("]")[0] for p in leaves if "[" in p}
    return f"{len(items)} entries" if items else dict(sorted(leaves.items()))


class LaunchTemplate(Kind[LtParams, LtOut, LtLive]):
    """A GPU pool's launch template: every EFA interface, IMDSv2, encrypted root volume,
    capacity-block market options, NodeConfig user data. A change is a new version."""

    name, params, outputs = "launch-template", LtParams, LtOut

    def _items(self, ctx: Context) -> list[dict[str, Any]]:
        return owned_items(ctx, "describe_launch_templates", "LaunchTemplates")

    def read(self, req: Request[LtParams]) -> Observed[LtOut, LtLive] | None:
        item = by_resource(self._items(req.ctx), req.rid)
        if item is None:
            return None
        lt_id = item["LaunchTemplateId"]
        version = int(item["DefaultVersionNumber"])
        data: dict[str, Any] = dict(template_version(req.ctx, lt_id, str(version)) or {})
        if "UserData" in data:
            data["UserData"] = base64.b64decode(data["UserData"]).decode()
        # The template's own tags are not part of its data (EC2 refuses a "launch-template"
        # tag specification inside LaunchTemplateData); moto files them there all the same.
        specs = [
            t
            for t in data.get("TagSpecifications", [])
            if t.get("ResourceType") != "launch-template"
        ]
        if "TagSpecifications" in data:
            data["TagSpecifications"] = specs
        live = LtLive(tuple(flatten(data)), tags_of(item))
        return Observed(LtOut(lt_id, version), live, lt_id)

    def desired(self, req: Request[LtParams], observed: Observed[LtOut, LtLive]) -> LtLive:
        data = launch_data(req.ctx, req.params.data, encode=False)
        tags = req.params.tags.resolve(observed.live.tags.get(CREATED_TAG))
        return LtLive(tuple(flatten(data)), tags)

    def diff(self, req: Request[LtParams], observed: Observed[LtOut, LtLive]) -> list[FieldChange]:
        want = self.desired(req, observed)
        changes = [c for c in super().diff(req, observed) if c.path == "tags"]
        have, need = dict(observed.live.data), dict(want.data)
        changed = sorted(
            p for p in set(have) | set(need) if have.get(p) != need.get(p) or need.get(p) is UNKNOWN
        )
        # One change per top-level setting (NetworkInterfaces, not each interface's leaves).
        tops = sorted({_top(p) for p in changed})
        for top in tops:
            before = {p: v for p, v in have.items() if _top(p) == top}
            after = {p: v for p, v in need.items() if _top(p) == top}
            changes.append(
                FieldChange(
                    f"data.{top}",
                    _shown(before),
                    _shown(after),
                    How.UPDATE,
                    "a new launch template version (CreateLaunchTemplateVersion)",
                )
            )
        return changes

    def create(self, req: Request[LtParams]) -> LtOut:
        ec2 = req.ctx.aws.client("ec2")
        try:
            made = ec2.create_launch_template(
                LaunchTemplateName=req.params.template_name,
                LaunchTemplateData=request_data(req.ctx, req.params.data),
                TagSpecifications=req.ctx.tag_spec("launch-template", req.params.tags),
                ClientToken=req.ctx.token(req.rid),
            )["LaunchTemplate"]
        except AlreadyExists as exc:
            req.ctx.forget("ec2:describe_launch_templates")
            found = self.read(req)
            if found is None:
                raise Foreign(
                    f"launch template {req.params.template_name} exists and is not fmctl's",
                    hint="delete it, or pick another cluster name",
                ) from exc
            return found.outputs
        return LtOut(made["LaunchTemplateId"], int(made["DefaultVersionNumber"]))

    def update(
        self,
        req: Request[LtParams],
        observed: Observed[LtOut, LtLive],
        changes: Sequence[FieldChange],
    ) -> LtOut:
        ec2 = req.ctx.aws.client("ec2")
        out = observed.outputs
        if any(c.path.startswith("data.") for c in changes):
            version = ec2.create_launch_template_version(
                LaunchTemplateId=observed.id,
                LaunchTemplateData=request_data(req.ctx, req.params.data),
                ClientToken=req.ctx.token(f"{req.rid}/v{observed.outputs.version + 1}"),
            )["LaunchTemplateVersion"]
            number = int(version["VersionNumber"])
            ec2.modify_launch_template(LaunchTemplateId=observed.id, DefaultVersion=str(number))
            out = LtOut(observed.id, number)
        for change in changes:
            if change.path == "tags":
                from provisioner.resources.tags import tag_updates

                retag(req.ctx, observed.id, *tag_updates(change.before, change.after))
        return out

    def outputs_after(
        self, observed: Observed[LtOut, LtLive], changes: Sequence[FieldChange]
    ) -> Any:
        """What dependents see once the planned update ran: a new version."""
        if any(c.path.startswith("data.") for c in changes):
            return LtOut(observed.id, UNKNOWN)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(tags_of(i).get(RESOURCE_TAG) or "?", i["LaunchTemplateId"])
            for i in self._items(ctx)
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        with contextlib.suppress(NotFound):
            ctx.aws.client("ec2").delete_launch_template(LaunchTemplateId=owned.id)
