"""`fmctl check NAME` on a Slurm cluster: gather what ``check_folder`` judges.

The head node (found by ParallelCluster's tags) runs slurm/lib/cluster-check.sh through SSM
Run Command (AWS-RunShellScript, as root), twice: node-check.sh on each partition's idle
nodes in an exclusive allocation; then, once fmctl has judged them, nccl-tests.sbatch across
each pool's nodes that passed. The command carries this
fmctl's copies of the scripts, so a cluster made by an older fmctl runs the same
check. Run Command keeps only 24,000 characters of output in its answer, so the whole stream
goes to the artifact bucket (under ``NAME-check/``, which the head node may write and nothing
else), is read back, split into the results folder, and deleted.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shlex
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provisioner.check.results import passed_nodes, split_stream
from provisioner.drivers.aws import AwsError
from provisioner.render.context import ClusterContext
from provisioner.resources.context import Context
from provisioner.resources.ssm_run import bundle, head_node, wait_invocation
from provisioner.resources.storage import artifact_bucket
from provisioner.shipped import shipped_dir

#: How long one pool's check takes (DCGM's level-2 diagnostic, then NCCL): when to look.
EXPECTED_SECONDS = 300.0
#: Where the command's output goes in the artifact bucket (the head node's one writable place).
CHECK_PREFIX = "{cluster}-check"


def command_script(args: list[str]) -> str:
    """The shell script Run Command runs on the head node: this fmctl's copies of the
    scripts, then ``cluster-check.sh ARGS``."""
    slurm = shipped_dir("slurm")
    files = {
        "cluster-check.sh": (slurm / "lib" / "cluster-check.sh").read_text(),
        # Where Slurm is on the node (ParallelCluster's /opt/slurm, or PCS's prefix).
        "slurm-prefix.sh": (slurm / "lib" / "slurm-prefix.sh").read_text(),
        "node-check.sh": (slurm / "lib" / "node-check.sh").read_text(),
        # node-check.sh's EFA counting rule, sent along with it to the nodes.
        "efa-devices.sh": (slurm / "lib" / "efa-devices.sh").read_text(),
        "nccl-tests.sbatch": (slurm / "jobs" / "nccl-tests.sbatch").read_text(),
    }
    return bundle(
        files,
        'FMCTL_NODE_CHECK="$work/node-check.sh" FMCTL_NCCL_JOB="$work/nccl-tests.sbatch" '
        f'bash "$work/cluster-check.sh" {shlex.join(args)}',
    )


def node_step(context: ClusterContext, include_busy: bool, timeout: int) -> list[str]:
    """cluster-check.sh's arguments for the node checks of every pool."""
    busy = ["--include-busy"] if include_busy else []
    return ["nodes", *busy, "--timeout", str(timeout), *(p.name for p in context.pools)]


def shared_folder(context: ClusterContext) -> str | None:
    """A folder the login or head node and every compute node see, for the NCCL job's log:
    ParallelCluster NFS-exports /home from the head node (the cookbook's shared dirs); PCS
    shares nothing of its own, so the cluster's FSx file system, or None without one."""
    if context.slurm_provider != "pcs":
        return "/home/fmctl-check"
    if context.fsx is None:
        return None
    return f"{context.fsx.mount_path.rstrip('/')}/.fmctl-check"


def nccl_step(context: ClusterContext, passed: dict[str, list[str]], timeout: int) -> list[str]:
    """cluster-check.sh's arguments for NCCL across each pool's passed nodes (two or more):
    POOL:GPUS:COUNT:HOSTLIST (none without a shared folder: ``shared_folder``)."""
    gpus = {p.name: p.gpus for p in context.pools}
    runs = [
        f"{pool}:{gpus[pool]}:{len(nodes)}:{hostlist(nodes)}"
        for pool, nodes in sorted(passed.items())
        if len(nodes) >= 2
    ]
    shared = shared_folder(context)
    if not runs or shared is None:
        return []
    return ["nccl", "--timeout", str(timeout), "--shared", shared, *runs]


def hostlist(names: list[str]) -> str:
    """Slurm's compressed form of node names (``train-st-p5-[1-3,7]``), so the command of a
    pool of a thousand nodes stays short."""
    numbered: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        match = re.fullmatch(r"(.*?)([1-9][0-9]*|0)", name)
        if match:
            numbered.setdefault(match.group(1), []).append(int(match.group(2)))
        else:
            plain.append(name)
    parts = list(plain)
    for prefix, numbers in sorted(numbered.items()):
        numbers.sort()
        spans: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            spans.append(str(start) if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        one = len(numbers) == 1
        parts.append(f"{prefix}{numbers[0]}" if one else f"{prefix}[{','.join(spans)}]")
    return ",".join(parts)


def gather_slurm(
    ctx: Context,
    context: ClusterContext,
    folder: Path,
    include_busy: bool = False,
    timeout: int = 1800,
    nccl: bool = True,
    on_progress: Callable[[str], None] = lambda line: None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[tuple[str, str, str]]:
    """Run the check on the head node, fill ``folder``; the nodes left out, with why."""
    run = functools.partial(
        _run_on_head_node,
        ctx,
        head_node(ctx, context.slurm_provider),
        artifact_bucket(ctx),
        len(context.pools),
        timeout,
        on_progress,
        sleep,
    )
    skipped = split_stream(run(node_step(context, include_busy, timeout)), folder)
    passed = passed_nodes(context, folder)
    step = nccl_step(context, passed, timeout) if nccl else []
    if step:
        split_stream(run(step), folder)
    elif nccl and shared_folder(context) is None:
        why = (
            "NCCL not run: PCS shares no /home and the cluster has no FSx file system, so "
            "no folder is seen by every node for the job's log (add storage.fsxLustre)"
        )
        skipped += [
            ("(nccl)", pool, why) for pool, nodes in sorted(passed.items()) if len(nodes) > 1
        ]
    return skipped


def _run_on_head_node(
    ctx: Context,
    instance: str,
    bucket: str,
    pools: int,
    timeout: int,
    on_progress: Callable[[str], None],
    sleep: Callable[[float], None],
    args: list[str],
) -> str:
    """One Run Command of cluster-check.sh ARGS; its whole stdout (then deleted from S3)."""
    prefix = f"{CHECK_PREFIX.format(cluster=ctx.cluster)}/{uuid.uuid4().hex[:8]}"
    ssm, s3 = ctx.aws.client("ssm"), ctx.aws.client("s3")
    # Each pool may wait up to `timeout` for its nodes.
    budget = min(timeout * max(pools, 1) + 600, 172800)
    sent = ssm.send_command(
        InstanceIds=[instance],
        DocumentName="AWS-RunShellScript",
        Comment=f"fmctl check {ctx.cluster}: {args[0]}",
        Parameters={"commands": [command_script(args)], "executionTimeout": [str(budget)]},
        OutputS3BucketName=bucket,
        OutputS3KeyPrefix=prefix,
        TimeoutSeconds=600,
    )
    command = sent["Command"]["CommandId"]
    on_progress(f"{args[0]}: sent command {command} to head node {instance}")
    try:
        expected = EXPECTED_SECONDS * max(pools, 1)
        found = wait_invocation(
            ssm, command, instance, expected, budget + 600, ctx.time_scale, sleep
        )
        if found["Status"] != "Success":
            raise AwsError(
                f"the check on head node {instance} ended {found['Status']}: "
                + (found.get("StandardErrorContent") or "").strip()[-500:],
                hint="SSM's agent must run on the head node (it does on ParallelCluster's "
                "AMIs) and its role may write s3://" + f"{bucket}/{prefix}",
            )
        return _output(s3, bucket, f"{prefix}/{command}/{instance}", found)
    except BaseException:
        # Interrupted or given up: stop the script on the head node (best effort; an NCCL
        # job it submitted ends at its own --time at the latest).
        with contextlib.suppress(Exception):
            ssm.cancel_command(CommandId=command, InstanceIds=[instance])
        raise
    finally:
        _delete_prefix(s3, bucket, prefix)


def _output(s3: Any, bucket: str, key_prefix: str, found: dict[str, Any]) -> str:
    """The command's whole stdout from S3 (Run Command's answer keeps only 24,000 chars)."""
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key_prefix)
    keys = [o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith("/stdout")]
    if keys:
        body: bytes = s3.get_object(Bucket=bucket, Key=keys[0])["Body"].read()
        return body.decode(errors="replace")
    return str(found.get("StandardOutputContent", ""))


def _delete_prefix(s3: Any, bucket: str, prefix: str) -> None:
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")
    victims = [{"Key": o["Key"]} for o in listed.get("Contents", [])]
    if victims:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": victims})
