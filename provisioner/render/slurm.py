"""Slurm output: the ParallelCluster config and the Slurm settings fmctl adds."""

from __future__ import annotations

import dataclasses

from provisioner.catalog.nccl_baselines import pair_floor
from provisioner.render.context import ClusterContext
from provisioner.render.engine import render_template
from provisioner.render.monitoring import alert_rules, dashboards
from provisioner.render.placeholders import placeholder
from provisioner.render.pools import PoolContext

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


#: Where the head node installs slurm/lib/task-prolog.sh (shared with the compute nodes).
TASK_PROLOG = "/opt/slurm/etc/scripts/fmctl-task-prolog.sh"


def cluster_slurm_settings(c: ClusterContext) -> list[tuple[str, str]]:
    """Cluster-wide slurm.conf settings fmctl adds (SlurmSettings.CustomSlurmSettings)."""
    settings = [
        # Run prolog.d scripts when the allocation starts (GPU/EFA checks before the job) and
        # keep every job process in the job's cgroup.
        ("PrologFlags", "Alloc,Contain"),
        # Batch jobs read no /etc/profile.d: the task prolog gives every task the NCCL/EFA
        # environment of its node (slurm/lib/task-prolog.sh; prints nothing off EFA nodes).
        # It lives in /opt/slurm, which the head node shares with every compute node: a
        # cluster that gains this setting on update has it on its running nodes too.
        ("TaskProlog", TASK_PROLOG),
    ]
    if c.topology_aware:
        settings.append(("TopologyPlugin", f"topology/{c.topology_style}"))
    assert not {k.lower() for k, _ in settings} & FORBIDDEN_SLURM_SETTINGS
    return settings


def node_names(c: ClusterContext, pool: PoolContext) -> str:
    """The Slurm node names ParallelCluster gives a pool's static nodes (hostlist form)."""
    kind = "st" if pool.static else "dy"
    return f"{pool.name}-{kind}-{pool.compute_resource_name}-[1-{pool.count}]"


def topology_conf(c: ClusterContext) -> str:
    """A starting topology.conf: one leaf switch per pool under one spine (one block per
    pool with topology/block).

    `fmctl up` replaces it with the real tree read from EC2's DescribeInstanceTopology once
    the nodes run; until then Slurm at least keeps each job inside one pool.
    """
    lines = [
        f"# topology.conf for {c.name}, rendered by fmctl (topology/{c.topology_style}).",
        "# Provisional: `fmctl up` rewrites it from ec2:DescribeInstanceTopology so jobs stay",
        "# under one network spine"
        + (" and inside one UltraServer." if c.topology_style == "block" else "."),
    ]
    if c.topology_style == "block":
        lines += [f"BlockName=block-{p.name} Nodes={node_names(c, p)}" for p in c.pools]
        # No block may be smaller than the base block size (slurmctld will not start).
        lines.append(f"BlockSizes={min(p.count for p in c.pools)}")
        return "\n".join(lines) + "\n"
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


def render_slurm(c: ClusterContext, *, early: bool = False) -> dict[str, str]:
    """Files of a Slurm (ParallelCluster) deployment folder.

    The config is the one `up` deploys: a file system fmctl makes is mounted by its id
    (FileSystemId), so a config committed from this folder never makes ParallelCluster
    create a second one. ``early`` writes it in ParallelCluster's own FSx settings instead,
    for its validators to run before the file system exists."""
    if c.fsx is not None and not c.fsx.existing_id and not early:
        c = dataclasses.replace(
            c, fsx=dataclasses.replace(c.fsx, existing_id=placeholder("fileSystemId"))
        )
    files = {
        "parallelcluster/cluster-config.yaml": render_template(
            "parallelcluster/cluster-config.yaml.j2", c=c, slurm_settings=cluster_slurm_settings(c)
        ),
        "slurm/fmctl-slurm.conf": slurm_settings_text(c),
    }
    if c.topology_aware:
        files["slurm/topology.conf"] = topology_conf(c)
    files.update(monitoring_files(c))
    files["slurm/health.env"] = health_env(c)
    return files


def health_env(c: ClusterContext) -> str:
    """What the nodes' health agent is told (spec health:; the agent sources it and
    on-node-configured.sh sets its timer from it)."""
    return (
        "# fmctl's health agent settings (spec health:), read by slurm/lib/health-agent.sh.\n"
        f"FMCTL_HEALTH_ENABLED={'true' if c.health_enabled else 'false'}\n"
        f"FMCTL_HEALTH_INTERVAL={c.health_interval_s}\n"
        f"FMCTL_HEALTH_MAX_IN_REPAIR={c.health_max_in_repair}\n"
        "# What follows a node-level fault: replace, reboot or drain-only (spec health.repair).\n"
        f"FMCTL_HEALTH_REPAIR={c.health_repair}\n"
        "# Storage each GPU node must have mounted and answering (empty: none in the spec).\n"
        f"FMCTL_FSX_MOUNT={c.fsx.mount_path if c.fsx else ''}\n"
        f"FMCTL_NVME_MOUNT={c.local_nvme_path or ''}\n"
        "# The verify gate (slurm/lib/verify-node.sh): DCGM diagnostic level, 0 for none.\n"
        f"FMCTL_HEALTH_VERIFY_DCGM_LEVEL={c.health_verify_dcgm_level}\n"
        "# ... and fi_pingpong through each EFA device (true or false).\n"
        f"FMCTL_HEALTH_VERIFY_EFA_LOOPBACK={'true' if c.health_verify_efa_loopback else 'false'}\n"
        "# ... and, once joined, a 2-node all-reduce with a healthy peer (lib/verify-pair.sh)\n"
        "# against each pool's floor: PARTITION:GBPS:BYTES, space-separated (the pools of two\n"
        "# nodes or more on EFA; the figures from provisioner/catalog/nccl_baselines.py).\n"
        f"FMCTL_HEALTH_VERIFY_NCCL_PAIR={'true' if c.health_verify_nccl_pair else 'false'}\n"
        f'FMCTL_NCCL_PAIR_FLOORS="{nccl_pair_floors(c)}"\n'
    )


def nccl_pair_floors(c: ClusterContext) -> str:
    """PARTITION:GBPS:BYTES of each GPU pool a pair can run on (two nodes or more, on EFA):
    what verify-pair.sh holds a new node's all-reduce with a peer to."""
    rows = []
    for pool in c.pools:
        if pool.gpus and pool.efa and pool.count >= 2:
            floor = pair_floor(pool.instance_type, pool.itype.network.bandwidth_gbps)
            rows.append(f"{pool.name}:{floor.floor_gbs:g}:{floor.size_bytes}")
    return " ".join(rows)


def scrape_jobs(c: ClusterContext) -> list[tuple[str, int, bool]]:
    """(job, port, compute nodes only) of what the head node's Prometheus scrapes by tag."""
    jobs = [("node", 9100, False)]
    if c.gpu_metrics:
        jobs.append(("dcgm", 9400, True))
    if c.efa_metrics and c.efa_pools:
        jobs.append(("efa", 9109, True))
    return jobs


def monitoring_files(c: ClusterContext) -> dict[str, str]:
    """slurm/monitoring/: the head node's Prometheus config, Grafana's provisioning and
    dashboards (uploaded with the scripts; on-node-configured.sh --monitoring installs them)."""
    if not c.prometheus:
        return {}
    files = {
        "slurm/monitoring/prometheus.yml": render_template(
            "slurm/prometheus.yml.j2", c=c, jobs=scrape_jobs(c)
        ),
        "slurm/monitoring/alert-rules.yml": alert_rules(c.idle_after),
    }
    if c.grafana:
        for part in ("datasources", "dashboards"):
            files[f"slurm/monitoring/grafana-{part}.yaml"] = render_template(
                f"slurm/grafana-{part}.yaml.j2", c=c
            )
        for name, text in dashboards("slurm").items():
            files[f"slurm/monitoring/dashboards/{name}"] = text
    return files


def _hostlist(prefix: str, first: int, last: int) -> str:
    return f"{prefix}{first}" if first == last else f"{prefix}[{first}-{last}]"


def pcluster_node_lines(c: ClusterContext) -> tuple[list[str], list[str]]:
    """The slurm.conf node/partition lines and gres.conf lines ParallelCluster writes for the
    rendered queues (static nodes ``-st-``, dynamic ``-dy-``, all State=CLOUD), with fmctl's
    per-node CustomSlurmSettings applied. Used to check the cluster's shape with a real
    slurmctld before anything exists."""
    conf: list[str] = []
    gres: list[str] = []
    for i, pool in enumerate(c.pools):
        cpu = pool.itype.cpu
        cr = pool.compute_resource_name
        names = []
        groups = (("st", 1, pool.min_count), ("dy", 1, pool.count - pool.min_count))
        for kind, first, count in groups:
            if count <= 0:
                continue
            hosts = _hostlist(f"{pool.name}-{kind}-{cr}-", first, first + count - 1)
            names.append(hosts)
            features = ",".join(
                f
                for f in (
                    "static" if kind == "st" else "dynamic",
                    pool.instance_type,
                    cr,
                    "efa" if pool.efa else "",
                    "gpu",
                )
                if f
            )
            line = (
                f"NodeName={hosts} CPUs={cpu.vcpus} Sockets={cpu.sockets} "
                f"CoresPerSocket={cpu.cores_per_socket} ThreadsPerCore={cpu.threads_per_core} "
                f"RealMemory={int(cpu.memory_gib * 1024 * 0.95)} State=CLOUD "
                f"Feature={features}"
            )
            if pool.gpus:
                line += f" Gres=gpu:{pool.gpu_type}:{pool.gpus}"
                gres.append(
                    f"NodeName={hosts} Name=gpu Type={pool.gpu_type} "
                    f"File=/dev/nvidia[0-{pool.gpus - 1}]"
                )
            conf.append(line)
        conf.append(
            f"PartitionName={pool.name} Nodes={','.join(names)} MaxTime=UNLIMITED "
            f"State=UP{' Default=YES' if i == 0 else ''}"
        )
    return conf, gres


def silent_gres_problems(slurm_conf: str) -> list[str]:
    """What Slurm accepts silently and fails on later: GPUs declared as Gres on nodes while
    GresTypes does not name gpu (slurmctld starts; jobs asking for GPUs never schedule)."""
    lines = [line.split("#", 1)[0].strip() for line in slurm_conf.splitlines()]
    types: set[str] = set()
    for line in lines:
        if line.lower().startswith("grestypes="):
            types |= {t.strip() for t in line.split("=", 1)[1].split(",")}
    problems = []
    for line in lines:
        for word in line.split():
            if word.startswith("Gres=") and line.startswith("NodeName="):
                kinds = {g.split(":", 1)[0] for g in word[5:].split(",")}
                missing = sorted(kinds - types)
                if missing:
                    problems.append(
                        f"{line.split()[0]}: Gres {','.join(missing)} without "
                        f"GresTypes={','.join(missing)}"
                    )
    return problems
