"""Where a command runs: a region of AWS, or the local sandbox emulator; and the run context
resource kinds work with there."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.drivers.aws import Aws
from provisioner.resources.context import Context, Event
from provisioner.state.location import StateLocation

__all__ = ["Context", "Event", "Target"]


@dataclass
class Target:
    """The region, and the sandbox's endpoint when sandboxed."""

    region: str
    home: Path
    sandbox: bool = False
    endpoint: str | None = None
    time_scale: float = 1.0
    ca_bundle: str | None = None
    #: ``--state`` / FMCTL_STATE, when given (see ``ops.team.location_of``).
    state: StateLocation | None = None
    #: The sandbox's key pair (its emulator accepts no other).
    credentials: tuple[str, str] | None = None
    #: The unfenced ``Aws`` of each kind made so far (``dataclasses.replace`` starts afresh).
    _made: dict[bool, Aws] = field(default_factory=dict, init=False, repr=False, compare=False)

    def aws(
        self, read_only: bool = False, fence: Callable[[], None] | None = None, own: bool = False
    ) -> Aws:
        """Clients for this target (``read_only``: every call but a read is refused;
        ``fence``: called before each one that is not, to stop it). Unfenced ones are made
        once per kind and shared (seeding, validation, who the caller is), instead of each
        making and handshaking clients of its own; ``own``: never shared, for clients that
        get hooks of their own (the state backend's fence)."""
        from provisioner.ops.region import Unresolved

        if isinstance(self.region, Unresolved):
            raise self.region.error
        shared = fence is None and not own
        if shared and read_only in self._made:
            return self._made[read_only]
        made = Aws(
            self.region,
            self.endpoint,
            self.sandbox,
            self.ca_bundle,
            self.credentials,
            read_only=read_only,
            fence=fence,
        )
        if shared:
            self._made[read_only] = made
        return made

    def token_args(self) -> tuple[str, ...]:
        """What a kubeconfig's `fmctl token` needs besides cluster and region to sign for
        this target: the sandbox's folder (its key pair), nothing against AWS."""
        return ("--sandbox", "--state-dir", str(self.home)) if self.sandbox else ()

    def folder(self, name: str) -> Path:
        """The cluster's local folder."""
        return self.home / "clusters" / name


def target_for(region: str, home: Path, sandbox: bool) -> Target:
    """A target; starts the sandbox emulator when asked and not running."""
    if not sandbox:
        endpoint = os.environ.get("AWS_ENDPOINT_URL")
        return Target(region, home, endpoint=endpoint, time_scale=endpoint_pace(endpoint))
    from provisioner.ops.sandbox_link import sandbox as installed

    box = installed()
    endpoint, scale, ca = box.ensure(home)
    creds = box.credentials(home)
    return Target(
        region, home, True, endpoint, scale, ca, credentials=(creds.access_key, creds.secret_key)
    )


def endpoint_pace(endpoint: str | None) -> float:
    """The time scale of waits against ``endpoint``: 1 against AWS; against another
    endpoint FMCTL_TIME_SCALE, else the endpoint's own word (a sandbox's), else 1
    (``drivers.endpoint_pace``)."""
    if not endpoint:
        return 1.0
    from provisioner.drivers.endpoint_pace import configured_scale, endpoint_scale

    return configured_scale() or endpoint_scale(endpoint, os.environ.get("AWS_CA_BUNDLE")) or 1.0


def pcluster_command(target: Target) -> list[str] | None:
    """ParallelCluster's command for this target, if installed (see ``find_pcluster``)."""
    from provisioner.drivers.pcluster import find_pcluster

    return find_pcluster(target.home)


def sandbox_validates_only(target: Target) -> bool:
    """In the sandbox a real ParallelCluster only validates (its create needs resources the
    emulator lacks); a stand-in named by FMCTL_PCLUSTER (tests) creates."""
    return target.sandbox and not os.environ.get("FMCTL_PCLUSTER")


def kubeconfig_path(target: Target | None, name: str) -> Path:
    """Where `up` writes the cluster's kubeconfig: merged into the user's (as `aws eks
    update-kubeconfig` does) against AWS; the cluster's own folder in the sandbox."""
    from provisioner.drivers.eks_auth import default_kubeconfig

    if target is None or target.sandbox:
        home = target.home if target else Path("~/.fmctl").expanduser()
        return home / "clusters" / name / "kubeconfig"
    return default_kubeconfig()


def make_context(
    target: Target,
    name: str,
    on_event: Callable[[Event], None] = lambda event: None,
    read_only: bool = False,
    fence: Callable[[], None] | None = None,
) -> Context:
    """A run context for cluster ``name`` on ``target`` (``fence``: see ``Target.aws``)."""
    return Context(
        aws=target.aws(read_only, fence),
        fence=fence or (lambda: None),
        cluster=name,
        region=target.region,
        time_scale=target.time_scale,
        on_event=on_event,
        pcluster=pcluster_command(target),
    )


def home_of(state_dir: str | None) -> Path:
    """``--state-dir``, else ``FMCTL_HOME``, else ``~/.fmctl``."""
    from provisioner.state.store import fmctl_home

    return fmctl_home(state_dir)


def stop_sandbox(home: Path) -> bool:
    """Stop the sandbox emulator of ``home`` (its state goes with it); False when none ran."""
    from provisioner.ops.sandbox_link import sandbox

    return sandbox().stop(home)


def exec_credential(target: Target, cluster: str) -> dict[str, object]:
    """The ExecCredential kubectl's exec plugin prints: a presigned STS call, valid ~15 min,
    never written down."""
    import time

    from provisioner.drivers.eks_auth import exec_credential as credential
    from provisioner.drivers.eks_auth import token

    return credential(token(target.aws(), cluster), time.time())


def _sandbox_op(
    home: Path, action: str, body: dict[str, Any], region: str = "us-east-1"
) -> dict[str, Any]:
    """One of the running sandbox's own operations (``sandbox.server``); its answer."""
    from provisioner.ops.sandbox_link import sandbox

    return sandbox().ask(home, action, body, region)


def sandbox_fault(home: Path, region: str, cluster: str, node: str, fault: dict[str, Any]) -> str:
    """Make ``node`` of sandbox EKS cluster ``cluster`` suffer ``fault`` (its node
    monitoring agent stand-in reports it; node auto repair acts on what it reports:
    fmctl_sandbox/eks_repair.py); what the agent did."""
    body = {"cluster": cluster, "node": node, "fault": fault}
    return str(_sandbox_op(home, "InjectNodeFault", body, region).get("said", ""))


def sandbox_spend(home: Path, cluster: str, region: str, amount: float) -> list[dict[str, Any]]:
    """Set the actual spend of the cluster's budget in the sandbox (AWS Budgets learns it
    from billing, hours late): each notification that crosses is sent; what went where."""
    from provisioner.resources.budgets import budget_name

    body = {"BudgetName": budget_name(cluster, region), "Amount": amount}
    sent: list[dict[str, Any]] = _sandbox_op(home, "SetBudgetSpend", body).get("sent", [])
    return sent


def sandbox_advance(home: Path, seconds: float) -> list[dict[str, Any]]:
    """Move the sandbox's EventBridge Scheduler clock on by ``seconds``: the schedules then
    due run (a ttl's, scaling the cluster to zero); what each run did."""
    said = _sandbox_op(home, "AdvanceClock", {"seconds": seconds})
    runs: list[dict[str, Any]] = said.get("runs", [])
    return runs
