"""Rendered files taken apart strictly, for the builders that read their resources off them
(EKS's aws/, PCS's pcs/): a key the resource model does not know is an error, so a template
and the model never drift apart silently."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from provisioner.blueprint.infra import Parts, placement_ref
from provisioner.blueprint.model import BlueprintError
from provisioner.drivers import yamlio
from provisioner.graph.ref import Ref
from provisioner.resources.launch_template import (
    Interface,
    LaunchTemplate,
    LtData,
    LtParams,
    Volume,
)
from provisioner.resources.tags import OWNER_TAG

#: A placeholder (or an id the spec names) -> the resource that fills it.
Lookup = Callable[[Any, str], Ref[Any]]


class Doc:
    """A mapping of a rendered file, taken apart key by key; ``done`` says if any key was
    left (the model does not know it)."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise BlueprintError(f"{where}: expected a mapping, found {type(data).__name__}")
        self.data = dict(data)
        self.where = where

    def take(self, key: str, default: Any = ...) -> Any:
        """The value of ``key`` (required unless a default is given)."""
        if key in self.data:
            return self.data.pop(key)
        if default is ...:
            raise BlueprintError(f"{self.where}: {key} is missing")
        return default

    def sub(self, key: str, default: Any = ...) -> Doc:
        """The mapping under ``key``."""
        return Doc(self.take(key, {} if default is not ... else default), f"{self.where}.{key}")

    def done(self) -> None:
        """Every key was taken."""
        if self.data:
            raise BlueprintError(
                f"{self.where}: {', '.join(sorted(self.data))} not known to the resource model"
            )


def load(files: dict[str, str], path: str) -> Doc:
    return Doc(yamlio.load(files[path]), path)


def tags_match(p: Parts, doc: Doc, where: str) -> None:
    """The file's tags are the spec's and the owner's: what DesiredTags adds per resource."""
    tags = {str(k): str(v) for k, v in (doc.take("tags", {}) or {}).items()}
    want = {**p.spec.metadata.tags, OWNER_TAG: p.c.name}
    if tags != want:
        raise BlueprintError(f"{where}: tags {tags} differ from the spec's {want}")


def volume(mapping: Any, where: str) -> Volume:
    m = Doc(mapping, where)
    ebs = m.sub("Ebs")
    volume = Volume(
        str(m.take("DeviceName")),
        int(ebs.take("VolumeSize")),
        str(ebs.take("VolumeType")),
        bool(ebs.take("Encrypted")),
        bool(ebs.take("DeleteOnTermination", True)),
    )
    ebs.done()
    m.done()
    return volume


def interface(nic: Any, where: str, refs: Lookup) -> Interface:
    n = Doc(nic, where)
    interface = Interface(
        int(n.take("NetworkCardIndex")),
        int(n.take("DeviceIndex")),
        str(n.take("InterfaceType")),
        tuple(refs(g, f"{where}.Groups") for g in n.take("Groups")),
        bool(n.take("DeleteOnTermination", True)),
    )
    n.done()
    return interface


def launch_template(
    p: Parts,
    files: dict[str, str],
    refs: Lookup,
    pool: str,
    *,
    path: str | None = None,
    rid: str | None = None,
    fills: Callable[[str, str], tuple[tuple[str, Ref[Any], str], ...]] | None = None,
) -> None:
    """Plan the launch template of ``pool`` from its file (``aws/launch-templates/POOL.yaml``
    unless ``path``); ``fills`` maps the placeholders in its user data to what fills them."""
    path = path or f"aws/launch-templates/{pool}.yaml"
    doc = load(files, path)
    name = str(doc.take("LaunchTemplateName"))
    doc.take("TagSpecifications")  # the template's own tags: DesiredTags, per resource
    data = doc.sub("LaunchTemplateData")
    meta = data.sub("MetadataOptions")
    volumes = [
        volume(m, f"{path}.BlockDeviceMappings[{i}]")
        for i, m in enumerate(data.take("BlockDeviceMappings"))
    ]
    interfaces = [
        interface(nic, f"{path}.NetworkInterfaces[{i}]", refs)
        for i, nic in enumerate(data.take("NetworkInterfaces"))
    ]
    market = data.take("InstanceMarketOptions", None)
    reservation = data.take("CapacityReservationSpecification", None)
    placement = data.take("Placement", None)
    group = placement_ref(p, pool) if placement else None
    if placement and (group is None or placement.get("GroupName") != f"{p.c.name}-{pool}"):
        raise BlueprintError(f"{path}: placement group {placement} is not the pool's")
    tag_specs = tuple(
        (str(t["ResourceType"]), tuple((str(x["Key"]), str(x["Value"])) for x in t["Tags"]))
        for t in data.take("TagSpecifications", [])
    )
    lt = LtData(
        instance_type=str(data.take("InstanceType")),
        http_tokens=str(meta.take("HttpTokens")),
        http_endpoint=str(meta.take("HttpEndpoint")),
        hop_limit=int(meta.take("HttpPutResponseHopLimit")),
        volumes=tuple(volumes),
        interfaces=tuple(interfaces),
        user_data=str(data.take("UserData")),
        market_type=market["MarketType"] if market else None,
        reservation_id=(
            reservation["CapacityReservationTarget"]["CapacityReservationId"]
            if reservation
            else None
        ),
        placement_group=group,
        instance_tags=tag_specs,
    )
    if fills is not None:
        lt = dataclasses.replace(lt, fills=fills(lt.user_data, f"{path}.UserData"))
    meta.done()
    data.done()
    doc.done()
    rid = rid or f"launch-template/{pool}"
    p.add(rid, LaunchTemplate, LtParams(name, lt, p.tags(rid)))
