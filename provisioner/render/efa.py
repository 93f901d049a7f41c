"""The network interfaces of a GPU launch template: one EFA device on every EFA-capable card.

Follows EC2's guidance for multi-card instances
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): the primary
interface is an ENA interface on card 0, device 0; a card-0 EFA device, where card 0 has one,
is an ``efa-only`` interface at device 1; every other EFA card gets an ``efa-only`` interface
at device 0. ``efa-only`` interfaces take no IP address, so a 32-card p5 uses one address,
not 32. Cards without EFA (p6-b300's card 0) carry only the primary interface. This is the
layout eksctl gets wrong for p6-b300, where it counts network cards instead of EFA devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from provisioner.catalog import InstanceType

InterfaceType = Literal["interface", "efa", "efa-only"]


@dataclass(frozen=True)
class NetworkInterface:
    """One entry of a launch template's NetworkInterfaces."""

    network_card_index: int
    device_index: int
    interface_type: InterfaceType

    @property
    def is_efa(self) -> bool:
        """True when this interface brings an EFA device."""
        return self.interface_type in ("efa", "efa-only")


def efa_interfaces(itype: InstanceType, efa: bool) -> list[NetworkInterface]:
    """The launch-template interfaces for ``itype`` (only the primary one when EFA is off)."""
    primary = NetworkInterface(0, 0, "interface")
    if not efa or not itype.efa_supported:
        return [primary]
    out = [primary]
    for card in itype.network.efa_cards:
        out.append(NetworkInterface(card, 1 if card == 0 else 0, "efa-only"))
    return out


def efa_device_count(interfaces: list[NetworkInterface]) -> int:
    """How many EFA devices the interfaces bring (the node's ``vpc.amazonaws.com/efa``)."""
    return sum(1 for i in interfaces if i.is_efa)
