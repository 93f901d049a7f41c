"""Driving AWS ParallelCluster's `pcluster` command (never imported: it pins old libraries
and needs Node.js, so it lives in a virtualenv of its own).

Every answer is read from the JSON `pcluster` prints; its exit status alone says nothing
(`create-cluster --dryrun true` exits 1 when the request would have succeeded).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner import FmctlError

#: How ParallelCluster's official AMI names spell each OS (aws-parallelcluster-VER-PART-ARCH).
IMAGE_OS_PART = {
    "alinux2023": "amzn2023-hvm",
    "ubuntu2204": "ubuntu-2204-lts-hvm",
    "ubuntu2404": "ubuntu-2404-lts-hvm",
    "rhel8": "rhel8-hvm",
    "rocky8": "rocky8-hvm",
    "rhel9": "rhel9-hvm",
    "rocky9": "rocky9-hvm",
}
DRYRUN_OK = "Request would have succeeded, but DryRun flag is set."
NO_CHANGES = "No changes found in your cluster configuration."
#: Where ParallelCluster writes the head node's bootstrap logs, by failure code.
LOG_HINTS = {
    "HeadNodeBootstrapFailure": "the head node's cfn-init and chef-client logs: CloudWatch log "
    "group /aws/parallelcluster/{name}-*, streams <head-node-id>.cfn-init and "
    "<head-node-id>.chef-client",
    "OnNodeConfiguredExecutionFailure": "the custom action's output: stream "
    "<head-node-id>.cfn-init (fmctl's scripts log as 'fmctl on-node-configured')",
    "OnNodeStartExecutionFailure": "stream <head-node-id>.cfn-init",
    "EfsMountFailure": "stream <head-node-id>.cfn-init",
    "FsxMountFailure": "stream <head-node-id>.cfn-init; check the FSx security group "
    "(TCP 988, 1018-1023 from the nodes)",
    "ClusterCreationFailure": "the CloudFormation stack's events (pcluster describe-cluster-"
    "instances; aws cloudformation describe-stack-events)",
}


class PclusterError(FmctlError):
    """`pcluster` failed or answered something fmctl cannot read."""

    default_hint = "the message is ParallelCluster's; `fmctl logs NAME` reads the head node's logs"


@dataclass(frozen=True)
class ValidationMessage:
    """One message of ParallelCluster's validators."""

    level: str
    type: str
    message: str


@dataclass
class DryRun:
    """The outcome of `create-cluster --dryrun true`."""

    ok: bool
    messages: list[ValidationMessage] = field(default_factory=list)
    error: str | None = None


@dataclass
class UpdatePlan:
    """The outcome of `update-cluster --dryrun true`."""

    ok: bool
    changes: list[dict[str, Any]] = field(default_factory=list)
    messages: list[ValidationMessage] = field(default_factory=list)
    error: str | None = None

    @property
    def parameters(self) -> list[str]:
        """The config paths that would change."""
        return [str(c.get("parameter", "?")) for c in self.changes]

    @property
    def needs_fleet_stop(self) -> bool:
        """True when ParallelCluster says the compute fleet must be stopped first."""
        return any(
            "compute fleet" in m.message.lower() and "stop" in m.message.lower()
            for m in self.messages
        )


def find_pcluster(home: Path) -> list[str] | None:
    """The command to run: FMCTL_PCLUSTER, `pcluster` on PATH, or the virtualenv that
    `fmctl setup parallelcluster` made and recorded."""
    explicit = os.environ.get("FMCTL_PCLUSTER")
    if explicit:
        return explicit.split()
    on_path = shutil.which("pcluster")
    if on_path:
        return [on_path]
    record = home / "parallelcluster.json"
    try:
        command: list[str] = json.loads(record.read_text())["command"]
    except (OSError, ValueError, KeyError):
        return None
    return command if Path(command[0]).exists() else None


def _messages(items: list[dict[str, Any]] | None) -> list[ValidationMessage]:
    return [
        ValidationMessage(
            str(m.get("level", "")), str(m.get("type", "")), str(m.get("message", ""))
        )
        for m in items or []
    ]


@dataclass
class ParallelCluster:
    """One region's `pcluster`."""

    command: list[str]
    region: str
    env: dict[str, str] | None = None
    timeout: float = 600

    def _run(self, *args: str) -> dict[str, Any]:
        # `pcluster version` refuses --region; every other command needs it.
        argv = [*self.command, *args, *(["--region", self.region] if args[0] != "version" else [])]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=self.env,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PclusterError(f"could not run {' '.join(argv[:2])}: {exc}") from exc
        text = done.stdout.strip()
        try:
            data: dict[str, Any] = json.loads(text[text.index("{") :]) if "{" in text else {}
        except ValueError as exc:
            raise PclusterError(
                f"pcluster {args[0]} printed no JSON (exit {done.returncode}):"
                f" {done.stderr.strip()[-500:]}"
            ) from exc
        if not data:
            raise PclusterError(
                f"pcluster {args[0]} printed nothing useful (exit "
                f"{done.returncode}): {done.stderr.strip()[-500:]}"
            )
        return data

    def _with_config(self, command: str, name: str, config: Path, *extra: str) -> dict[str, Any]:
        return self._run(
            command, "--cluster-name", name, "--cluster-configuration", str(config), *extra
        )

    def version(self) -> str:
        """ParallelCluster's version (its official AMIs are named after it)."""
        return str(self._run("version").get("version", ""))

    def dryrun(self, name: str, config: Path, suppress: tuple[str, ...] = ()) -> DryRun:
        """Validate a config with ParallelCluster's validators (all but ``suppress``, by
        type name); creates nothing."""
        extra = ["--suppress-validators", *(f"type:{v}" for v in suppress)] if suppress else []
        data = self._with_config("create-cluster", name, config, "--dryrun", "true", *extra)
        message = str(data.get("message", ""))
        if message == DRYRUN_OK:
            return DryRun(True, _messages(data.get("validationMessages")))
        errors = _messages(data.get("configurationValidationErrors"))
        return DryRun(False, errors or _messages(data.get("validationMessages")), message)

    def create(self, name: str, config: Path) -> dict[str, Any]:
        """Start creating the cluster; returns its summary."""
        data = self._with_config("create-cluster", name, config, "--rollback-on-failure", "false")
        if "cluster" not in data:
            errors = _messages(data.get("configurationValidationErrors"))
            detail = "; ".join(f"{m.type}: {m.message}" for m in errors)
            raise PclusterError(f"create-cluster refused: {data.get('message', '')} {detail}")
        summary: dict[str, Any] = data["cluster"]
        return summary

    def describe(self, name: str) -> dict[str, Any] | None:
        """The cluster's description, or None when there is no such cluster."""
        data = self._run("describe-cluster", "--cluster-name", name)
        if "clusterStatus" not in data:
            if "does not exist" in str(data.get("message", "")):
                return None
            raise PclusterError(f"describe-cluster: {data.get('message', data)}")
        return data

    def delete(self, name: str) -> None:
        """Start deleting the cluster (a missing cluster is not an error)."""
        data = self._run("delete-cluster", "--cluster-name", name)
        if "cluster" not in data and "does not exist" not in str(data.get("message", "")):
            raise PclusterError(f"delete-cluster: {data.get('message', data)}")

    def update_dryrun(self, name: str, config: Path) -> UpdatePlan:
        """What an update would change, and whether ParallelCluster allows it now."""
        data = self._with_config("update-cluster", name, config, "--dryrun", "true")
        changes = list(data.get("changeSet", []))
        message = str(data.get("message", ""))
        if message == DRYRUN_OK:
            return UpdatePlan(True, changes, _messages(data.get("validationMessages")))
        if NO_CHANGES in message:
            return UpdatePlan(True)
        refused = [
            ValidationMessage("ERROR", str(e.get("parameter", "")), str(e.get("message", "")))
            for e in data.get("updateValidationErrors") or []
        ]
        refused += _messages(data.get("configurationValidationErrors"))
        return UpdatePlan(False, changes, refused, message)

    def update(self, name: str, config: Path) -> dict[str, Any]:
        """Start updating the cluster to ``config``; returns its summary."""
        data = self._with_config("update-cluster", name, config)
        if "cluster" not in data:
            raise PclusterError(f"update-cluster refused: {data.get('message', data)}")
        summary: dict[str, Any] = data["cluster"]
        return summary


def failure_text(name: str, description: dict[str, Any]) -> str:
    """What went wrong with a cluster, and where its logs are."""
    failures = description.get("failures") or []
    if not failures:
        return f"cluster {name} is {description.get('clusterStatus')}"
    parts = []
    for failure in failures:
        code = str(failure.get("failureCode", "?"))
        hint = LOG_HINTS.get(code, "the CloudFormation stack's events").format(name=name)
        parts.append(f"{code}: {failure.get('failureReason', '')} (see {hint})")
    return f"cluster {name} is {description.get('clusterStatus')}: " + "; ".join(parts)
