"""Slurm output: the ParallelCluster config and the Slurm settings fmctl adds."""

from __future__ import annotations

from provisioner.render.context import ClusterContext, PoolContext
from provisioner.render.engine import render_template

#: slurm.conf parameters ParallelCluster 3.16 refuses in cluster-level CustomSlurmSettings
#: (it manages them: its validators/slurm_settings_validator.py), compared lower-cased. fmctl
#: never emits them; prolog/epilog scripts go into prolog.d / epilog.d instead.
FORBIDDEN_SLURM_SETTINGS = frozenset(
    {
        "epilog",
        "grestypes",
        "launchparameters",
        "prolog",
        "reconfigflags",
        "resumefailprogram",
        "resumeprogram",
        "resumetimeout",
        "slurmctldhost",
        "slurmctldlogfile",
        "slurmctldparameters",
        "slurmdlogfile",
        "slurmuser",
        "suspendexcnodes",
        "suspendprogram",
        "suspendtime",
        "taskplugin",
        "treewidth",
        "accountingstoragetype",
        "accountingstoragehost",
        "accountingstorageport",
        "accountingstorageuser",
        "jobacctgathertype",
    }
)
#: The same for compute-resource settings.
FORBIDDEN_NODE_SETTINGS = frozenset(
    {"cpus", "gres", "nodeaddr", "nodehostname", "nodename", "state", "weight"}
)


def cluster_slurm_settings(c: ClusterContext) -> list[tuple[str, str]]:
    """Cluster-wide slurm.conf settings fmctl adds (SlurmSettings.CustomSlurmSettings)."""
    settings = [
        # Run prolog.d scripts when the allocation starts (GPU/EFA checks before the job) and
        # keep every job process in the job's cgroup.
        ("PrologFlags", "Alloc,Contain"),
    ]
    if c.topology_aware:
        settings.append(("TopologyPlugin", "topology/tree"))
    assert not {k.lower() for k, _ in settings} & FORBIDDEN_SLURM_SETTINGS
    return settings


def node_names(c: ClusterContext, pool: PoolContext) -> str:
    """The Slurm node names ParallelCluster gives a pool's static nodes (hostlist form)."""
    kind = "st" if pool.static else "dy"
    return f"{pool.name}-{kind}-{pool.compute_resource_name}-[1-{pool.count}]"


def topology_conf(c: ClusterContext) -> str:
    """A starting topology.conf: one leaf switch per pool under one spine.

    `fmctl up` replaces it with the real tree read from EC2's DescribeInstanceTopology once
    the nodes run; until then Slurm at least keeps each job inside one pool.
    """
    lines = [
        f"# topology.conf for {c.name}, rendered by fmctl (topology/tree).",
        "# Provisional: `fmctl up` rewrites it from ec2:DescribeInstanceTopology so jobs stay",
        "# under one network spine.",
    ]
    leaves = []
    for pool in c.pools:
        leaf = f"leaf-{pool.name}"
        leaves.append(leaf)
        lines.append(f"SwitchName={leaf} Nodes={node_names(c, pool)}")
    lines.append(f"SwitchName=spine Switches={','.join(leaves)}")
    return "\n".join(lines) + "\n"


def slurm_settings_text(c: ClusterContext) -> str:
    """OUT/slurm/fmctl-slurm.conf: what fmctl adds to the cluster's Slurm, readable."""
    lines = [
        f"# Slurm settings fmctl adds to cluster {c.name} (through ParallelCluster).",
        "# Cluster-wide (SlurmSettings.CustomSlurmSettings):",
    ]
    lines += [f"{key}={value}" for key, value in cluster_slurm_settings(c)]
    for pool in c.pools:
        cpu = pool.itype.cpu
        lines += [
            "",
            f"# Queue {pool.name}: {pool.count} x {pool.instance_type}"
            f" ({pool.gpus} x {pool.itype.gpu.model if pool.itype.gpu else '-'}, "
            f"{pool.efa_devices} EFA devices); node names {node_names(c, pool)}",
            f"#   per node (ComputeResources[].CustomSlurmSettings): Sockets={cpu.sockets} "
            f"CoresPerSocket={cpu.cores_per_socket} ThreadsPerCore={cpu.threads_per_core}",
            f"#   GRES (ParallelCluster writes it): Gres=gpu:{pool.gpu_type}:{pool.gpus}",
        ]
    return "\n".join(lines) + "\n"


def render_slurm(c: ClusterContext) -> dict[str, str]:
    """Files of a Slurm (ParallelCluster) deployment folder."""
    files = {
        "parallelcluster/cluster-config.yaml": render_template(
            "parallelcluster/cluster-config.yaml.j2", c=c, slurm_settings=cluster_slurm_settings(c)
        ),
        "slurm/fmctl-slurm.conf": slurm_settings_text(c),
    }
    if c.topology_aware:
        files["slurm/topology.conf"] = topology_conf(c)
    return files
