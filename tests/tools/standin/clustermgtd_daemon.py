"""ParallelCluster's clustermgtd as the head node runs it (``python -m
slurm_plugin.clustermgtd``, its config file named by CONFIG_FILE), for the stand-in fleet of
clustermgtd.py. What it is given follows ParallelCluster's own sources:

- its config file: the cookbook's parallelcluster_clustermgtd.conf.erb, key for key, plus
  ``loop_time`` (60 s unless told; a test's is shorter) and its packaged logging config with
  the two log files moved out of /var/log/parallelcluster;
- the fleet config (fleet-config.json): pcluster_fleet_config_generator.py's shape for a
  compute resource of one instance type (``"Api": "run-instances"``);
- the partition-to-nodes map in ``etc/pcluster/parallelcluster_partition_nodelist_mapping.json``
  beside Slurm's bin (common/schedulers/slurm_commands.py reads it there);
- ``get-compute-fleet-status.sh`` as the cookbook's reads the fleet's status item.

Slurm's commands reach the head node's slurmctld through wrappers that enter it, and
``sudo`` runs its command: clustermgtd runs as root here.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.tools.standin.node import StandinNode

ROOT = Path(__file__).resolve().parents[3]
PCLUSTER_PY = ROOT / ".venv-pcluster/bin/python"


@dataclass(frozen=True)
class Settings:
    """The cluster clustermgtd keeps: one queue, one compute resource of static nodes."""

    cluster: str
    queue: str
    resource: str
    count: int
    instance_type: str
    region: str
    table: str
    loop_time: int
    #: Its own fixed waits (the 5 s it sleeps each loop before it lists EC2's instances,
    #: clustermgtd.py _get_ec2_instances) times this; 1 runs it untouched.
    wait_scale: float = 1.0


def _wrappers(s: Settings, head: StandinNode, scratch: Path) -> Path:
    """Slurm's commands as clustermgtd calls them (``sudo BIN/scontrol``), each entering
    the head node, and the partition map beside them."""
    home = scratch / "slurm"
    (home / "bin").mkdir(parents=True)
    for command in ("scontrol", "sinfo", "squeue"):
        head.entry(home / "bin" / command, f"/opt/slurm/bin/{command}")
    bin_dir = scratch / "path"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    # The cookbook's get-compute-fleet-status.sh runs compute_fleet_status.py --action
    # get: the COMPUTE_FLEET item of the cluster's parallelcluster-CLUSTER table, printed
    # as JSON with these two keys.
    (bin_dir / "get-compute-fleet-status.sh").write_text(
        f"#!{PCLUSTER_PY}\n"
        "import json, boto3\n"
        f"table = boto3.resource('dynamodb').Table('parallelcluster-{s.cluster}')\n"
        "item = table.get_item(ConsistentRead=True, Key={'Id': 'COMPUTE_FLEET'})\n"
        "data = item['Item']['Data']\n"
        "print(json.dumps({k: data[k] for k in ('lastStatusUpdatedTime', 'status')}))\n"
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    mapping = home / "etc/pcluster/parallelcluster_partition_nodelist_mapping.json"
    mapping.parent.mkdir(parents=True)
    mapping.write_text(json.dumps({s.queue: f"{s.queue}-st-{s.resource}-[1-{s.count}]"}))
    return home


def start(
    s: Settings, head: StandinNode, scratch: Path, aws: dict[str, str]
) -> subprocess.Popen[bytes]:
    """clustermgtd running for the cluster ``s`` describes, its files in ``scratch``, its
    boto3 pointed by ``aws`` (the emulator's endpoint and credentials)."""
    home = _wrappers(s, head, scratch)
    fleet = scratch / "fleet-config.json"
    fleet.write_text(
        json.dumps(
            {
                s.queue: {
                    s.resource: {
                        "CapacityType": "on-demand",
                        "Api": "run-instances",
                        "Instances": [{"InstanceType": s.instance_type}],
                    }
                }
            }
        )
    )
    # Its packaged logging config, its two log files (console output, events) moved
    # from /var/log/parallelcluster into the scratch folder.
    logging = scratch / "logging.conf"
    packaged = subprocess.run(
        [
            str(PCLUSTER_PY),
            "-c",
            "import slurm_plugin, pathlib; print(pathlib.Path(slurm_plugin.__file__).parent"
            " / 'logging/parallelcluster_clustermgtd_logging.conf')",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    logging.write_text(
        Path(packaged).read_text().replace("/var/log/parallelcluster/", f"{scratch}/")
    )
    config = scratch / "parallelcluster_clustermgtd.conf"
    config.write_text(
        "[clustermgtd]\n"
        f"cluster_name = {s.cluster}\n"
        f"region = {s.region}\n"
        "proxy = NONE\n"
        f"heartbeat_file_path = {scratch}/clustermgtd_heartbeat\n"
        f"dynamodb_table = {s.table}\n"
        "hosted_zone = \n"
        "dns_domain = \n"
        "use_private_hostname = false\n"
        "head_node_private_ip = 127.0.0.1\n"
        "head_node_hostname = head\n"
        "node_replacement_timeout = 1800\n"
        "insufficient_capacity_timeout = 600\n"
        "compute_console_logging_enabled = true\n"
        "compute_console_logging_max_sample_size = 1\n"
        "compute_console_wait_time = 300\n"
        "instance_id = i-head\n"
        f"fleet_config_file = {fleet}\n"
        f"loop_time = {s.loop_time}\n"
        f"logging_config = {logging}\n"
    )
    env = {
        "PATH": f"{scratch / 'path'}:/usr/sbin:/usr/bin:/sbin:/bin",
        "CONFIG_FILE": str(config),
        "SLURM_BINARIES_DIR": str(home / "bin"),
        "HOME": str(scratch),
        **aws,
    }
    log = open(scratch / "clustermgtd.log", "wb")  # noqa: SIM115 - the daemon's
    argv = [str(PCLUSTER_PY), "-m", "slurm_plugin.clustermgtd"]
    if s.wait_scale != 1.0:
        argv = [
            str(PCLUSTER_PY),
            "-c",
            "import time, types, slurm_plugin.clustermgtd as m\n"
            "clock = types.SimpleNamespace(**vars(time))\n"
            f"clock.sleep = lambda s: time.sleep(s * {s.wait_scale!r})\n"
            "m.time = clock\n"
            "m.main()\n",
        ]
    return subprocess.Popen(
        argv,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=scratch,
    )
