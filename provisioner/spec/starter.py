"""The commented starter spec printed by `fmctl init`.

Built from the catalog so the example is right for the chosen type (EFA on or off, local
NVMe, Capacity Block support) and always passes `fmctl validate`.
"""

from __future__ import annotations

from provisioner.catalog import InstanceType
from provisioner.spec import defaults


def starter_spec(
    *,
    scheduler: str,
    itype: InstanceType,
    count: int,
    name: str,
    region: str,
    provider: str = defaults.SLURM_PROVIDER,
    zone: str | None = None,
    zone_note: str = "",
) -> str:
    """A complete, valid spec with comments explaining each choice (``provider``: who runs
    Slurm, for scheduler slurm; ``zone``: the availability zone, with what was checked of
    it, ``zone_note``)."""
    az = zone or f"{region}a"
    zone_comment = f"  # {az}: {zone_note}\n" if zone_note else ""
    vpc = (
        f"  vpcCidr: {defaults.VPC_CIDR}        # a new VPC; or vpcId + subnetId to reuse "
        "existing ones\n"
    )
    efa = "true" if itype.efa_supported else "false"
    nvme = (
        f"  localNvme: {{mountPath: {defaults.LOCAL_NVME_MOUNT_PATH}}}   # RAID0 over "
        f"{itype.local_nvme.count} x {itype.local_nvme.size_gb} GB NVMe\n"
        if itype.local_nvme
        else ""
    )
    gpus = f"{itype.gpu.count} x {itype.gpu.model}" if itype.gpu else "no GPUs"
    efa_note = (
        f"{itype.network.efa_interfaces} EFA devices"
        if itype.efa_supported
        else "no EFA on this type"
    )
    placement = "true" if itype.placement_group else "false"
    throughput = defaults.FSX_THROUGHPUT_PER_TIB[defaults.FSX_DEPLOYMENT_TYPE]
    head = (
        defaults.HEAD_NODE_INSTANCE_TYPE_ARM64
        if itype.architecture == "arm64"
        else defaults.HEAD_NODE_INSTANCE_TYPE
    )
    # One architecture for the whole cluster, as the default for arm64 pools has it.
    system = (
        defaults.SYSTEM_NODE_INSTANCE_TYPE_ARM64
        if itype.architecture == "arm64"
        else defaults.SYSTEM_NODE_INSTANCE_TYPE
    )
    capacity = (
        "{type: capacity-block, reservationId: cr-0123456789abcdef0}   # UltraServers: "
        "Capacity\n      # Blocks only; put your block's id here"
        if itype.ultra_server
        else "{type: on-demand}  # spot | reservation | capacity-block (+ reservationId)"
    )
    nodes_block = (
        f"  headNode: {{instanceType: {head}}}   # Slurm controller ({itype.architecture}, as the "
        "pools)\n"
        if scheduler == "slurm"
        else f"  systemNodes: {{instanceType: {system}, "
        f"count: {defaults.SYSTEM_NODE_COUNT}}}   # controllers, Prometheus, Grafana "
        f"({itype.architecture}, as the pools)\n"
    )
    access = (
        "  # sshCidr: 198.51.100.0/24    # who may SSH to the head node; absent = nobody "
        "(use SSM)\n"
        if scheduler == "slurm"
        else "  apiCidrs: []                  # who may reach the Kubernetes API, e.g. your VPN's\n"
        "                                # range; [] = private: fmctl runs inside the VPC\n"
    )
    slurm = _slurm_block(itype, provider) if scheduler == "slurm" else ""
    return f"""\
# fmctl cluster spec: `fmctl validate -f FILE` checks it, `fmctl validate -f FILE
# --show-defaults` prints it with every default, `fmctl schema` gives editors its schema.
apiVersion: fmctl.dev/v1alpha1
kind: Cluster
metadata:
  name: {name}
  region: {region}
  ttl: 8h                       # `fmctl gc --expired` tears it down after this; remove to keep
  tags: {{team: research}}        # copied onto every AWS resource
scheduler: {scheduler}              # slurm | kubernetes; `--scheduler` overrides it
network:
  availabilityZone: {az}    # one AZ: EFA and cluster placement groups need it
{zone_comment}{vpc}{access}compute:
{nodes_block}  gpuPools:
    - name: train
      instanceType: {itype.name}   # {gpus}, {efa_note}
      count: {count}
      capacity: {capacity}
      efa: {efa}
      placementGroup: {placement}       # keep false with a reservation or a capacity block
storage:
  fsxLustre:
    capacityGiB: {defaults.FSX_CAPACITY_GIB}             # PERSISTENT_2: 1200 or n x 2400
    deploymentType: {defaults.FSX_DEPLOYMENT_TYPE}
    throughputPerTiB: {throughput}         # 125 | 250 | 500 | 1000
    mountPath: {defaults.FSX_MOUNT_PATH}
    # s3: {{importPath: s3://bucket/data, exportPath: s3://bucket/checkpoints}}
{nvme}observability: {{prometheus: true, grafana: true, gpuMetrics: true, efaMetrics: true}}
{slurm}kubernetes: {{version: "{defaults.KUBERNETES_VERSION}"}}
"""


def _slurm_block(itype: InstanceType, provider: str) -> str:
    """The slurm: section: nothing for ParallelCluster (its defaults), PCS's settings with
    the version PCS still creates clusters on (and an AMI to fill in for UltraServers)."""
    if provider != "pcs":
        return ""
    version = defaults.pcs_slurm_version()
    ami = (
        "  amiId: ami-0123456789abcdef0   # UltraServers: an AMI with nvidia-imex (no PCS sample\n"
        "                                 # AMI has it); put your image's id here\n"
        if itype.ultra_server
        else "  # amiId: ami-...              # without it, AWS's PCS sample AMI for the version\n"
    )
    return f"""slurm:
  provider: pcs                  # AWS PCS runs the Slurm controller (no head node)
{ami}  pcs:
    slurmVersion: "{version}"        # the newest PCS still creates clusters on
    size: {defaults.PCS_SIZE}                    # SMALL (32 nodes) | MEDIUM (512) | LARGE (2048)
"""
