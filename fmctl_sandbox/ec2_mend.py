"""Where moto's EC2 answers unlike AWS in a way that would hide a bug in fmctl's teardown,
the sandbox mends it (once per process, on moto's backend class).

AWS refuses to delete what something still depends on, with ``DependencyViolation`` (the
EC2 API reference's error codes: "The specified object has dependent resources"); moto 5.2
refuses a VPC only while it has subnets. Here, as in AWS:

- a subnet that still holds a network interface (an instance's, a NAT gateway's, an EKS
  control-plane ENI, one the VPC CNI or a load balancer left) cannot be deleted;
- a security group that a network interface uses, or that another group's rule names,
  cannot be deleted;
- a VPC that still has subnets, security groups besides its default, an attached internet
  gateway or network interfaces cannot be deleted.

And a deleted NAT gateway takes its network interface with it and lets go of its Elastic IP
(moto 5.2 marks it deleted and keeps both, which would block its subnet for ever); the
interfaces RunInstances creates are deleted when their instance terminates unless the call
said otherwise (the EC2 User Guide, "Network interface attributes": delete on termination
is the default for interfaces created with the instance; moto 5.2 keeps them). Terminating
an instance again succeeds, as in AWS (TerminateInstances is idempotent: "terminated
instances remain visible ... for approximately one hour"); its interfaces are not deleted
twice. An instance whose subnet is named only in its primary network interface (as a launch
template names it) takes its private address from that subnet's range (the EC2 API
reference, the network interface's PrivateIpAddress: unspecified, "Amazon EC2 selects one for
you from the subnet's IPv4 CIDR range"; moto 5.2 draws a random 10.x address then). And
RunInstances with a launch template and no network settings of its own launches into the
template's primary network interface's subnet and security groups (the EC2 User Guide,
launch templates: the request's parameters override the template's, the template's apply
otherwise; moto 5.2 ignores the template's NetworkInterfaces and uses the default VPC).

RegisterImage keeps the image's RootDeviceName and Architecture (the EC2 API reference's
RegisterImage request; moto 5.2 drops both and answers /dev/sda1 and x86_64 for every
registered image, which would hide a launch template naming another root device).

moto 5.2 also copies a launch template's tags once, at creation, and describes that copy:
tags set later with CreateTags (EC2 tags launch templates like any resource) match tag
filters but never show in DescribeLaunchTemplates. The template's tags are read live.
"""

from __future__ import annotations

from typing import Any


def _dependency(message: str) -> Exception:
    from moto.ec2.exceptions import DependencyViolationError

    return DependencyViolationError(message)


def _interfaces(backend: Any) -> list[Any]:
    return list(backend.enis.values())


def _group_ids(eni: Any) -> set[str]:
    return {g.id for g in eni.group_set}


def _referenced(backend: Any, group_id: str) -> bool:
    """Another group's rule names ``group_id`` as its source or destination."""
    for groups in backend.groups.values():
        for group in groups.values():
            if group.id == group_id:
                continue
            for rule in [*group.ingress_rules, *group.egress_rules]:
                if (rule.source_group or {}).get("GroupId") == group_id:
                    return True
    return False


def _mend_register_image() -> None:
    from moto.ec2.responses.amis import AmisResponse

    register = AmisResponse.register_image

    def register_image(self: Any) -> Any:
        answer = register(self)
        made: Any = answer.result
        image = self.ec2_backend.amis[made["ImageId"]]
        root = self._get_param("RootDeviceName")
        if root:
            image.root_device_name = root
        architecture = self._get_param("Architecture")
        if architecture:
            image.architecture = architecture
        return answer

    AmisResponse.register_image = register_image  # type: ignore[method-assign]


def _mend_template_network() -> None:
    from moto.ec2.models import EC2Backend

    run_instances = EC2Backend.run_instances

    def run(self: Any, image_id: str, count: int, user: Any, groups: Any, **kwargs: Any) -> Any:
        own_network = kwargs.get("subnet_id") or kwargs.get("nics")
        if kwargs.get("launch_template") and not own_network:
            template = self._get_template_from_args(kwargs["launch_template"]).data
            primary: dict[str, Any] = next(
                (
                    n
                    for n in template.get("NetworkInterfaces") or []
                    if int(n.get("DeviceIndex") or 0) == 0
                ),
                {},
            )
            if primary.get("SubnetId"):
                kwargs["subnet_id"] = primary["SubnetId"]
            if primary.get("Groups") and not kwargs.get("security_group_ids"):
                kwargs["security_group_ids"] = list(primary["Groups"])
        return run_instances(self, image_id, count, user, groups, **kwargs)

    EC2Backend.run_instances = run  # type: ignore[method-assign,assignment]


def mend() -> None:
    """Apply the mends above to moto's EC2 (idempotent)."""
    from moto.ec2.models import EC2Backend
    from moto.ec2.models.elastic_network_interfaces import NetworkInterface
    from moto.ec2.models.instances import Instance
    from moto.ec2.models.launch_templates import LaunchTemplate

    if getattr(EC2Backend, "_fmctl_mended", False):
        return
    EC2Backend._fmctl_mended = True  # type: ignore[attr-defined]
    _mend_register_image()
    _mend_template_network()

    if not isinstance(getattr(LaunchTemplate, "tags", None), property):
        LaunchTemplate.tags = property(  # type: ignore[assignment]
            lambda self: self.get_tags(), lambda self, value: None
        )

    delete_subnet = EC2Backend.delete_subnet
    delete_group = EC2Backend.delete_security_group
    delete_vpc = EC2Backend.delete_vpc
    delete_nat = EC2Backend.delete_nat_gateway

    def subnet(self: Any, subnet_id: str) -> Any:
        if any(e.subnet.id == subnet_id for e in _interfaces(self)):
            raise _dependency(f"The subnet '{subnet_id}' has dependencies and cannot be deleted.")
        return delete_subnet(self, subnet_id)

    def group(self: Any, name: str | None = None, group_id: str | None = None) -> Any:
        found = self.get_security_group_from_id(group_id) if group_id else None
        if found is not None and (
            any(found.id in _group_ids(e) for e in _interfaces(self)) or _referenced(self, found.id)
        ):
            raise _dependency(f"resource {found.id} has a dependent object")
        return delete_group(self, name=name, group_id=group_id)

    def vpc(self: Any, vpc_id: str) -> Any:
        groups = [g for g in self.groups.get(vpc_id, {}).values() if g.name != "default"]
        gateways = [
            g for g in self.internet_gateways.values() if g.vpc is not None and g.vpc.id == vpc_id
        ]
        interfaces = [e for e in _interfaces(self) if e.subnet.vpc_id == vpc_id]
        if groups or gateways or interfaces:
            raise _dependency(f"The vpc '{vpc_id}' has dependencies and cannot be deleted.")
        return delete_vpc(self, vpc_id)

    def nat(self: Any, nat_gateway_id: str) -> Any:
        gateway = delete_nat(self, nat_gateway_id)
        eni = getattr(gateway, "_eni", None)
        if eni is not None and eni.id in self.enis:
            for address in list(self.addresses):
                if address.eni is eni:
                    address.eni = None
            eni.delete()
        return gateway

    prep_nics = Instance.prep_nics

    def nics(self: Any, nic_spec: list[dict[str, Any]], *args: Any, **kwargs: Any) -> None:
        before = set(self.ec2_backend.enis)
        primary = next((n for n in nic_spec if int(n.get("DeviceIndex") or 0) == 0), None)
        if (
            not self._subnet_id
            and primary is not None
            and primary.get("SubnetId")
            and not primary.get("PrivateIpAddress")
            and kwargs.get("private_ip") is None
        ):
            # The primary address comes from the interface's subnet (moto 5.2 draws a random
            # 10.x address when the subnet is named only in the interface, as a launch
            # template names it).
            subnet = self.ec2_backend.get_subnet(primary["SubnetId"])
            kwargs["private_ip"] = subnet.get_available_subnet_ip(instance=self)
            self._private_ips.add(kwargs["private_ip"])
        prep_nics(self, nic_spec, *args, **kwargs)
        asked = {int(n.get("DeviceIndex") or 0): n.get("DeleteOnTermination") for n in nic_spec}
        for index, eni in self.nics.items():
            if eni.id not in before and asked.get(index) is not False:
                eni.delete_on_termination = True

    delete_eni = NetworkInterface.delete

    def eni_gone(self: Any) -> None:
        # An instance terminated again deletes its interfaces again (moto's terminate).
        if self.id in self.ec2_backend.enis:
            delete_eni(self)

    NetworkInterface.delete = eni_gone  # type: ignore[method-assign]
    Instance.prep_nics = nics  # type: ignore[method-assign]
    EC2Backend.delete_subnet = subnet  # type: ignore[method-assign]
    EC2Backend.delete_security_group = group  # type: ignore[method-assign]
    EC2Backend.delete_vpc = vpc  # type: ignore[method-assign]
    EC2Backend.delete_nat_gateway = nat  # type: ignore[method-assign]
