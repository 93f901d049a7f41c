"""Commands run on a cluster's Slurm controller host through SSM Run Command (the
AWS-RunShellScript document, as root, with no profile read): the head node of a
ParallelCluster cluster or a login node of a PCS one, found by their tags. `fmctl check`
runs its checks this way, `up` its drains.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from provisioner.drivers.aws import AwsError
from provisioner.graph.pacing import poll_schedule
from provisioner.resources.context import Context

if TYPE_CHECKING:
    from types_boto3_ec2.type_defs import FilterTypeDef

#: Run Command's states that end an invocation.
FINISHED = {"Success", "Failed", "Cancelled", "TimedOut", "Cancelling"}


def head_node(ctx: Context, provider: str = "parallelcluster") -> str:
    """The running head node's instance id, from the tags ParallelCluster puts on it; on AWS
    PCS, a running login node's (PCS's cluster tag, fmctl's cluster and pool tags)."""
    ec2 = ctx.aws.client("ec2")
    if provider == "pcs":
        from provisioner.catalog.pcs import CLUSTER_TAG

        filters: list[FilterTypeDef] = [
            {"Name": "tag:fmctl.dev/cluster", "Values": [ctx.cluster]},
            {"Name": "tag:fmctl.dev/pool", "Values": ["login"]},
            {"Name": "tag-key", "Values": [CLUSTER_TAG]},
        ]
        what = "login node"
    else:
        filters = [
            {"Name": "tag:parallelcluster:cluster-name", "Values": [ctx.cluster]},
            {"Name": "tag:parallelcluster:node-type", "Values": ["HeadNode"]},
        ]
        what = "head node"
    found = ec2.describe_instances(
        Filters=[*filters, {"Name": "instance-state-name", "Values": ["running"]}]
    )
    ids = [i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]]
    if not ids:
        raise AwsError(
            f"{ctx.cluster} has no running {what} in {ctx.aws.region}",
            hint=f"`fmctl status {ctx.cluster}` shows the cluster's state",
        )
    return str(sorted(ids)[0])


def _invocation(ssm: Any, command: str, instance: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = ssm.get_command_invocation(CommandId=command, InstanceId=instance)
    except Exception as exc:
        # Run Command answers InvocationDoesNotExist until the agent has the command.
        if "InvocationDoesNotExist" in type(exc).__name__ + str(exc):
            return None
        raise
    return found


def wait_invocation(
    ssm: Any,
    command: str,
    instance: str,
    expected: float,
    limit: float,
    scale: float,
    sleep: Callable[[float], None],
) -> dict[str, Any]:
    """The invocation once it finished (or an error past ``limit`` seconds)."""
    started = time.monotonic()
    for offset in poll_schedule(expected, scale):
        sleep(max(0.0, started + offset - time.monotonic()))
        found = _invocation(ssm, command, instance)
        if found is not None and found["Status"] in FINISHED:
            return found
        if time.monotonic() - started > limit:
            break
    raise AwsError(
        f"the command on {instance} did not finish in {limit:.0f}s",
        hint=f"aws ssm list-command-invocations --command-id {command} --details",
    )


def bundle(files: dict[str, str], command: str) -> str:
    """A shell script that writes ``files`` (name -> text) into a scratch folder ($work),
    then runs ``command`` there: the node runs this fmctl's copies of its scripts, whatever
    an older fmctl left on it."""
    lines = ["set -euo pipefail", "work=$(mktemp -d)", "trap 'rm -rf \"$work\"' EXIT"]
    marker = "FMCTL_SCRIPT_EOF"
    for name, text in files.items():
        assert marker not in text, f"{name} contains the heredoc marker"
        lines += [f"cat > \"$work/{name}\" <<'{marker}'", text.rstrip("\n"), marker]
    lines.append(command)
    return "\n".join(lines) + "\n"


def run_script(
    ctx: Context,
    instance: str,
    script: str,
    comment: str,
    expected: float,
    limit: float,
    sleep: Callable[[float], None] = time.sleep,
    wait: float | None = None,
) -> dict[str, Any]:
    """Run ``script`` on ``instance`` and wait for it: its invocation (Status,
    ResponseCode, StandardOutputContent: the first 24,000 characters, enough for a short
    report). ``wait``: how long to wait for the answer (by default the run's ``limit`` and
    SSM's ten minutes to deliver it to an agent that is offline now)."""
    ssm = ctx.aws.client("ssm")
    sent = ssm.send_command(
        InstanceIds=[instance],
        DocumentName="AWS-RunShellScript",
        Comment=comment[:100],  # SendCommand's limit for Comment
        Parameters={"commands": [script], "executionTimeout": [str(int(limit))]},
        TimeoutSeconds=600,
    )
    command = sent["Command"]["CommandId"]
    deadline = limit + 600 if wait is None else wait
    return wait_invocation(ssm, command, instance, expected, deadline, ctx.time_scale, sleep)
