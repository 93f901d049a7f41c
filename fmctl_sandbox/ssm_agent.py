"""SSM Run Command for the sandbox's instances (moto accepts a command but runs nothing and
writes no output).

``SendCommand`` with AWS-RunShellScript is checked as SSM checks it (named instances must
exist in the region; ``Targets`` name them by ``InstanceIds`` or by one tag, ``tag:KEY``,
which resolves to the region's running instances carrying it, none being no error) and then
run one instance after another under ``MaxConcurrency`` 1, else side by side, as the agent
on each instance would, in a thread: the ``commands`` as one bash script, with the tools
folder the sandbox was given for its nodes first on PATH (``KubeServer.node_tools``; a
test's double of the emulator puts a fake Slurm there: sinfo, srun, sbatch). Without one,
the invocation fails and says why. The invocation goes Pending, InProgress, then Success or
Failed by the script's exit status (TimedOut past ``executionTimeout``); stdout and stderr
are kept (24,000 characters in the answer, as SSM does) and, when the command names
``OutputS3BucketName``, written whole to
``PREFIX/COMMAND/INSTANCE/awsrunShellScript/0.awsrunShellScript/{stdout,stderr}`` in the
emulator's S3.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fmctl_sandbox import protocol as p
from fmctl_sandbox.protocol import Call

Answer = tuple[int, dict[str, str], bytes]


#: Instances that are not moto's, by id, with their tags: the EKS node groups' nodes
#: (``eks_asg.instances``).
Others = Mapping[str, Mapping[str, str]]


def targeted(ec2: Any, params: dict[str, Any], others: Others | None = None) -> list[str]:
    """The instances a SendCommand names: ``InstanceIds``, or its ``Targets`` (``InstanceIds``
    or ``tag:KEY``: the region's running instances with that tag's value among ``Values``,
    moto's and ``others``)."""
    named = list(params.get("InstanceIds") or [])
    for target in params.get("Targets") or []:
        key, values = str(target.get("Key", "")), list(target.get("Values") or [])
        if key == "InstanceIds":
            named += values
        elif key.startswith("tag:"):
            wanted = {"instance-state-name": ["running"], key: values}
            for reservation in ec2.describe_instances(wanted):
                named += [instance.id for instance in reservation.instances]
            tag = key.removeprefix("tag:")
            named += [i for i, tags in (others or {}).items() if tags.get(tag) in values]
    return list(dict.fromkeys(named))


#: What GetCommandInvocation returns of the output, as SSM truncates it.
ANSWER_LIMIT = 24000


@dataclass
class Invocation:
    """One command on one instance."""

    command: str
    instance: str
    comment: str
    status: str = "Pending"
    code: int = -1
    stdout: str = ""
    stderr: str = ""

    def summary(self) -> dict[str, Any]:
        """What GetCommandInvocation and ListCommandInvocations both answer of it."""
        return {
            "CommandId": self.command,
            "InstanceId": self.instance,
            "Comment": self.comment,
            "DocumentName": "AWS-RunShellScript",
            "Status": self.status,
            "StatusDetails": self.status,
        }


@dataclass
class Agent:
    """Every instance's agent; ``tools`` gives the nodes' tools folder (or None)."""

    tools: Callable[[], str | None]
    account: str
    #: The region's instances that are not moto's (EKS nodes), with their tags.
    others: Callable[[str], Others] = lambda region: {}
    #: (region, command, instance) -> its invocation: a command is its region's.
    invocations: dict[tuple[str, str, str], Invocation] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The lock over AWS's state (the shims' and moto's): uploads to S3 happen under it.
    aws_state: threading.RLock = field(default_factory=threading.RLock)

    def send(self, call: Call) -> Answer:
        """SendCommand: check, record, start each instance's run."""
        params = call.params
        if params.get("DocumentName") != "AWS-RunShellScript":
            return p.json_error(
                400, "InvalidDocument", "the sandbox's agent runs AWS-RunShellScript only"
            )
        from moto.ec2.models import ec2_backends

        ec2 = ec2_backends[self.account][call.region]
        others = self.others(call.region)
        instances = targeted(ec2, params, others)
        for instance in params.get("InstanceIds") or []:
            if instance in others:
                continue
            try:
                ec2.get_instance(instance)
            except Exception:  # noqa: BLE001 - moto's not-found for an unknown instance
                return p.json_error(400, "InvalidInstanceId", f"{instance} is not a managed node")
        script = "\n".join(params.get("Parameters", {}).get("commands", []))
        timeout = float((params.get("Parameters", {}).get("executionTimeout") or ["3600"])[0])
        command = str(uuid.uuid4())
        where = (params.get("OutputS3BucketName"), params.get("OutputS3KeyPrefix", ""))
        items = []
        for instance in instances:
            item = Invocation(command, instance, params.get("Comment", ""))
            with self.lock:
                self.invocations[(call.region, command, instance)] = item
            items.append(item)
        groups = [items] if params.get("MaxConcurrency") == "1" else [[i] for i in items]
        for group in groups:
            threading.Thread(
                target=self._run_each, args=(group, script, timeout, where), daemon=True
            ).start()
        return p.json_response(
            {
                "Command": {
                    "CommandId": command,
                    "DocumentName": "AWS-RunShellScript",
                    "InstanceIds": instances,
                    "Comment": params.get("Comment", ""),
                    "Status": "Pending",
                    "OutputS3BucketName": where[0] or "",
                    "OutputS3KeyPrefix": where[1],
                }
            }
        )

    def get(self, call: Call) -> Answer:
        """GetCommandInvocation."""
        key = (call.region, call.params.get("CommandId", ""), call.params.get("InstanceId", ""))
        with self.lock:
            item = self.invocations.get(key)
            if item is None:
                return p.json_error(400, "InvocationDoesNotExist", "no such invocation")
            return p.json_response(
                {
                    **item.summary(),
                    "ResponseCode": item.code,
                    "StandardOutputContent": item.stdout[:ANSWER_LIMIT],
                    "StandardErrorContent": item.stderr[:ANSWER_LIMIT],
                }
            )

    def listed(self, call: Call) -> Answer:
        """ListCommandInvocations: the region's invocations, of one command (``CommandId``)
        or on one instance (``InstanceId``), without their output (``Details`` false)."""
        command, instance = call.params.get("CommandId"), call.params.get("InstanceId")
        with self.lock:
            found = [
                item.summary()
                for (region, _, _), item in self.invocations.items()
                if region == call.region
                and command in (None, item.command)
                and instance in (None, item.instance)
            ]
        return p.json_response({"CommandInvocations": found})

    def _run_each(
        self, items: list[Invocation], script: str, timeout: float, where: tuple[str | None, str]
    ) -> None:
        for item in items:
            self._run(item, script, timeout, where)

    def _run(
        self, item: Invocation, script: str, timeout: float, where: tuple[str | None, str]
    ) -> None:
        tools = self.tools()
        with self.lock:
            item.status = "InProgress"
        if tools is None:
            out, err, code, status = (
                "",
                "sandbox: the command did not run: the sandbox's instances run no programs "
                "(no Slurm, nvidia-smi or dcgmi), so what asks a node (fmctl check, fmctl "
                "health, up --wait-healthy on Slurm) needs a real cluster\n",
                1,
                "Failed",
            )
        else:
            with tempfile.TemporaryDirectory(prefix="fmctl-ssm-") as scratch:
                try:
                    done = subprocess.run(
                        ["bash", "-c", script],
                        env={
                            "PATH": f"{tools}:/usr/bin:/bin",
                            "HOME": scratch,
                            "TMPDIR": scratch,
                            # The instance's shared folder (a head node's /home, which
                            # ParallelCluster's compute nodes mount).
                            "FMCTL_CHECK_SHARED": f"{scratch}/shared",
                        },
                        cwd=scratch,
                        capture_output=True,
                        text=True,
                        timeout=timeout,
                        check=False,
                    )
                    out, err, code = done.stdout, done.stderr, done.returncode
                    status = "Success" if code == 0 else "Failed"
                except subprocess.TimeoutExpired:
                    out, err, code, status = "", "timed out\n", 124, "TimedOut"
        bucket, prefix = where
        if bucket:
            self._upload(bucket, f"{prefix}/{item.command}/{item.instance}", out, err)
        with self.lock:
            item.stdout, item.stderr, item.code, item.status = out, err, code, status

    def _upload(self, bucket: str, base: str, out: str, err: str) -> None:
        from moto.s3.models import s3_backends

        s3 = s3_backends[self.account]["global"]
        step = "awsrunShellScript/0.awsrunShellScript"
        with self.aws_state:
            for name, text in (("stdout", out), ("stderr", err)):
                if text:
                    s3.put_object(bucket, f"{base.lstrip('/')}/{step}/{name}", text.encode())
