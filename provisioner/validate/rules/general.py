"""Rules for metadata, the Kubernetes settings and observability."""

from __future__ import annotations

import re
from collections.abc import Iterator

from provisioner.catalog.eks_versions import CALENDAR
from provisioner.catalog.regions import REGIONS
from provisioner.catalog.s3_names import bucket_problem
from provisioner.spec import defaults
from provisioner.spec.durations import seconds
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem, suggest
from provisioner.spec.resolve import shrinks
from provisioner.validate.rules.registry import RuleContext, rule

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{2,39}$")
K8S_VERSION_RE = re.compile(r"^1\.(\d+)$")


#: What a cluster name may be, said as the hint wherever a name is refused.
NAME_RULE = (
    "3-40 characters: lowercase letters, digits and single '-', starting with a letter and "
    "not ending with '-'"
)


def is_cluster_name(name: str) -> bool:
    """True for a name fmctl gives clusters (the spec's rule; commands taking a NAME check
    it before any call, so a name no cluster can have never reaches AWS)."""
    return bool(NAME_RE.match(name)) and not name.endswith("-") and "--" not in name


@rule("name-format")
def cluster_name(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Names become AWS resource names and DNS labels: keep them short and plain."""
    name = spec.metadata.name
    if not is_cluster_name(name):
        yield Problem(
            "name-format",
            f"cluster name {name!r} is not allowed",
            ("metadata", "name"),
            hint=NAME_RULE,
        )


@rule("region-unknown")
def region(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """The region must be a real commercial AWS region."""
    if spec.metadata.region not in REGIONS:
        yield Problem(
            "region-unknown",
            f"unknown AWS region {spec.metadata.region!r}",
            ("metadata", "region"),
            hint=suggest(spec.metadata.region, REGIONS) or "e.g. us-east-1, us-west-2",
        )


def parse_ttl(text: str) -> int | None:
    """Seconds in a ttl such as ``8h``, ``3d`` or ``1h30m``; None when malformed or zero."""
    return seconds(text)


@rule("drain-timeout")
def drain_timeout(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """compute.drain.timeout is a positive duration, or 0 (take the nodes without
    draining them: the way out when the login node cannot be reached)."""
    text = spec.compute.drain.timeout
    if text.strip() != "0" and parse_ttl(text) is None:
        yield Problem(
            "drain-timeout",
            f"drain timeout {spec.compute.drain.timeout!r} is not a duration",
            ("compute", "drain", "timeout"),
            hint="write it like 30m, 2h or 1h30m (0: no drain, the work on them ends)",
        )


@rule("ttl-format")
def ttl(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """The ttl must be a positive duration in days, hours and minutes."""
    if spec.metadata.ttl is not None and parse_ttl(spec.metadata.ttl) is None:
        yield Problem(
            "ttl-format",
            f"ttl {spec.metadata.ttl!r} is not a duration",
            ("metadata", "ttl"),
            hint="write it like 8h, 3d or 1h30m",
        )


@rule("state-location")
def state_location(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """An S3 state needs a valid bucket name; a local one takes none."""
    state = spec.state
    if state.backend == "s3" and not state.bucket:
        yield Problem(
            "state-location",
            "state.backend s3 needs a bucket",
            ("state",),
            hint="add `bucket: NAME` (create it with `fmctl state init s3://NAME/PREFIX`)",
        )
    elif state.backend == "s3" and state.bucket and (problem := bucket_problem(state.bucket)):
        yield Problem("state-location", problem, ("state", "bucket"), hint="fix the name")
    elif state.backend == "local" and state.bucket:
        yield Problem(
            "state-location",
            "state.bucket is set but state.backend is local",
            ("state", "backend"),
            hint="write `backend: s3` to keep the state in the bucket, or drop `bucket`",
        )
    if state.prefix.strip("/") != state.prefix or not state.prefix:
        yield Problem(
            "state-location",
            f"state.prefix {state.prefix!r} must be a non-empty key prefix without leading "
            "or trailing '/'",
            ("state", "prefix"),
            hint="write it like teams/ml",
        )


@rule("tag-reserved")
def tags(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """AWS reserves ``aws:``; fmctl owns ``fmctl.dev/`` (its ownership tags)."""
    for key, value in spec.metadata.tags.items():
        path = ("metadata", "tags", key)
        if key.lower().startswith("aws:") or key.startswith("fmctl.dev/"):
            yield Problem(
                "tag-reserved",
                f"tag key {key!r} uses a reserved prefix",
                path,
                hint="'aws:' belongs to AWS and 'fmctl.dev/' to fmctl's ownership "
                "tags; choose another key",
            )
        elif not 1 <= len(key) <= 128 or len(value) > 256:
            yield Problem(
                "tag-reserved",
                f"tag {key!r} is too long",
                path,
                hint="tag keys take at most 128 characters, values 256",
            )


@rule("kubernetes-version")
def kubernetes_version(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """EKS versions fmctl supports (and has manifests checked against)."""
    version = spec.kubernetes.version
    supported = defaults.KUBERNETES_VERSIONS
    span = f"{supported[0]} to {supported[-1]}"
    if not K8S_VERSION_RE.match(version):
        yield Problem(
            "kubernetes-version",
            f"{version!r} is not a Kubernetes version",
            ("kubernetes", "version"),
            hint=f'write it quoted, e.g. "1.33" ({span})',
        )
    elif version not in supported:
        yield Problem(
            "kubernetes-version",
            f"Kubernetes {version} is outside the supported range {span}",
            ("kubernetes", "version"),
            hint=f'use a supported version, e.g. "{defaults.KUBERNETES_VERSION}"',
        )
    elif ctx.scheduler == "kubernetes":
        yield from _eks_support(version, ctx)


def _eks_support(version: str, ctx: RuleContext) -> Iterator[Problem]:
    """EKS's release calendar: extended support costs six times as much; past it, AWS
    upgrades the cluster itself (catalog/eks_versions.py)."""
    release = CALENDAR.get(version)
    if release is None:
        return
    support = release.support(ctx.today)
    where = ("kubernetes", "version")
    if support == "ended":
        yield Problem(
            "kubernetes-version",
            f"Kubernetes {version} left EKS extended support on {release.end_of_extended}",
            where,
            hint=f'EKS creates no cluster on it; use "{defaults.KUBERNETES_VERSION}"',
        )
    elif support == "extended":
        yield Problem(
            "kubernetes-version",
            f"Kubernetes {version} is in EKS extended support since {release.end_of_standard} "
            f"(until {release.end_of_extended})",
            where,
            level="warning",
            hint="the control plane costs $0.60 an hour instead of $0.10, and with "
            f'upgradePolicy STANDARD AWS upgrades it itself; "{defaults.KUBERNETES_VERSION}" is '
            "in standard support",
        )


KMS_KEY_ARN_RE = re.compile(
    r"^arn:aws(-cn|-us-gov)?:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
    r"[0-9a-f]{4}-[0-9a-f]{12}$|^arn:aws(-cn|-us-gov)?:kms:[a-z0-9-]+:\d{12}:key/mrk-[0-9a-f]{32}$"
)


@rule("secrets-key-arn")
def secrets_key(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """A given secrets key is a KMS key ARN in the cluster's region (EKS refuses others)."""
    arn = spec.kubernetes.secrets_key_arn
    if arn is None:
        return
    if not KMS_KEY_ARN_RE.match(arn):
        yield Problem(
            "secrets-key-arn",
            f"{arn!r} is not a KMS key ARN",
            ("kubernetes", "secretsKeyArn"),
            hint="arn:aws:kms:REGION:ACCOUNT:key/KEY-ID (an alias ARN is not accepted by EKS)",
        )
    elif arn.split(":")[3] != spec.metadata.region:
        yield Problem(
            "secrets-key-arn",
            f"the key is in {arn.split(':')[3]}, the cluster in {spec.metadata.region}",
            ("kubernetes", "secretsKeyArn"),
            hint="EKS encrypts secrets only with a key in the cluster's own region",
        )


@rule("grafana-needs-prometheus")
def observability(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Grafana's provisioned datasource is the cluster's Prometheus."""
    obs = spec.observability
    if obs.grafana and not obs.prometheus:
        yield Problem(
            "grafana-needs-prometheus",
            "grafana is on but prometheus is off",
            ("observability", "grafana"),
            hint="turn prometheus on, or grafana off: its dashboards read Prometheus",
            related=(("observability", "prometheus"),),
        )


AMP_WORKSPACE_RE = re.compile(
    r"^arn:aws(-cn|-us-gov)?:aps:[a-z0-9-]+:\d{12}:workspace/ws-[0-9a-zA-Z-]+$"
)


@rule("amp-workspace")
def amp_workspace(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Remote write needs a workspace ARN and a Prometheus to write from; another region
    works, at the price of cross-region traffic."""
    arn = spec.observability.amp_workspace_arn
    if arn is None:
        return
    where = ("observability", "ampWorkspaceArn")
    if not AMP_WORKSPACE_RE.match(arn):
        yield Problem(
            "amp-workspace",
            f"{arn!r} is not an Amazon Managed Service for Prometheus workspace ARN",
            where,
            hint="arn:aws:aps:REGION:ACCOUNT:workspace/ws-ID (aws amp list-workspaces)",
        )
    elif not spec.observability.prometheus:
        yield Problem(
            "amp-workspace",
            "a workspace to remote-write to, but prometheus is off",
            where,
            hint="turn prometheus on (it is what writes to the workspace), or drop the ARN",
            related=(("observability", "prometheus"),),
        )
    elif arn.split(":")[3] != spec.metadata.region:
        yield Problem(
            "amp-workspace",
            f"the workspace is in {arn.split(':')[3]}, the cluster in {spec.metadata.region}",
            where,
            level="warning",
            hint="it works, but every sample crosses regions (billed as inter-region traffic); "
            "a workspace in the cluster's region avoids that",
        )


#: The retentions CloudWatch Logs accepts (botocore's logs model, PutRetentionPolicy
#: retentionInDays): any other number is refused by the API after the cluster exists.
LOG_RETENTION_DAYS = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
    2922, 3288, 3653,
)  # fmt: skip


@rule("log-retention")
def log_retention(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """The control-plane log group's retention is one CloudWatch accepts."""
    days = spec.kubernetes.control_plane_log_days
    if days not in LOG_RETENTION_DAYS:
        near = min(LOG_RETENTION_DAYS, key=lambda d: (abs(d - days), d))
        yield Problem(
            "log-retention",
            f"CloudWatch Logs cannot keep logs for {days} days",
            ("kubernetes", "controlPlaneLogDays"),
            hint=f"the nearest it accepts is {near}; it takes "
            + ", ".join(str(d) for d in LOG_RETENTION_DAYS),
        )


#: What Argo CD and Flux clone: https, ssh:// or scp-like git@host:path (their docs' forms).
REPO_URL_RE = re.compile(r"^(https://[^\s/]+/\S+|ssh://[^\s/]+/\S+|[\w.-]+@[\w.-]+:\S+)$")


@rule("gitops-repo")
def gitops_repo(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """The repository is one Argo CD and Flux can clone, and its path stays inside it;
    `inClusterStack: gitops` needs the repository, or nothing would apply the stack."""
    gitops = spec.gitops
    if gitops.repo_url is not None and not REPO_URL_RE.match(gitops.repo_url):
        yield Problem(
            "gitops-repo",
            f"{gitops.repo_url!r} is not a repository URL Argo CD and Flux can clone",
            ("gitops", "repoUrl"),
            hint="write https://HOST/ORG/REPO.git, ssh://git@HOST/ORG/REPO.git or "
            "git@HOST:ORG/REPO.git",
        )
    path = gitops.path
    if path is not None and (
        path.startswith("/") or ".." in path.split("/") or not path.strip("./")
    ):
        yield Problem(
            "gitops-repo",
            f"{path!r} is not a folder inside the repository",
            ("gitops", "path"),
            hint="a relative path from the repository's root, e.g. clusters/NAME",
        )
    if (
        ctx.scheduler == "kubernetes"
        and spec.kubernetes.in_cluster_stack == "gitops"
        and gitops.repo_url is None
    ):
        yield Problem(
            "gitops-repo",
            "inClusterStack is gitops, but there is no gitops.repoUrl for Argo CD or Flux",
            ("kubernetes", "inClusterStack"),
            hint="add gitops: {repoUrl: https://HOST/ORG/REPO.git} (where you commit the "
            "folder), or set inClusterStack: fmctl",
        )


#: An address Budgets can mail (the shape of one: something@domain.tld, no spaces).
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")
#: An SNS topic's ARN (partition, region, 12-digit account, topic name).
SNS_ARN_RE = re.compile(r"^arn:aws(?:-[a-z]+)*:sns:[a-z]{2}(?:-[a-z]+)+-\d:\d{12}:[\w-]{1,256}$")
#: A Budgets notification may have one SNS subscriber and up to 10 email subscribers
#: (botocore's budgets model, the Notification shape's documentation; Subscribers: 1 to 11).
MAX_EMAILS, MAX_TOPICS = 10, 1


@rule("cost-budget")
def cost_budget(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """cost.budget names one limit (monthly or total) above zero, and subscribers AWS Budgets
    takes: emails and at most one SNS topic, 10 emails at most; a budget that only alerts
    needs someone to tell (Budgets refuses a notification without a subscriber)."""
    budget = spec.cost.budget
    if budget is None:
        return
    where = ("cost", "budget")
    if (budget.monthly is None) == (budget.total is None):
        yield Problem(
            "cost-budget",
            "a budget needs one limit: monthly or total"
            + (", not both" if budget.monthly is not None else ""),
            where,
            hint="monthly: 20000 (USD a calendar month) or total: 50000 (USD over the "
            "cluster's life)",
        )
    else:
        key = "monthly" if budget.monthly is not None else "total"
        limit = budget.limit() or 0.0
        if not 0.01 <= limit <= 1e9:
            yield Problem(
                "cost-budget",
                f"a {key} limit of {limit:g} is not an amount of USD from 0.01 to 1e9",
                (*where, key),
                hint="the limit in US dollars, like 20000",
            )
    emails = topics = 0
    for index, address in enumerate(budget.notify):
        if SNS_ARN_RE.match(address):
            topics += 1
            if topics > MAX_TOPICS:
                yield Problem(
                    "cost-budget",
                    f"a second SNS topic to notify ({address})",
                    (*where, "notify", index),
                    hint="AWS Budgets sends each notification to one SNS topic at most: "
                    "subscribe the others to that one",
                )
        elif EMAIL_RE.match(address):
            emails += 1
            if emails > MAX_EMAILS:
                yield Problem(
                    "cost-budget",
                    f"more than {MAX_EMAILS} email addresses to notify",
                    (*where, "notify", index),
                    hint="AWS Budgets mails 10 addresses at most: use a list address, or an "
                    "SNS topic with the others subscribed",
                )
        else:
            yield Problem(
                "cost-budget",
                f"{address!r} is neither an email address nor an SNS topic ARN",
                (*where, "notify", index),
                hint="ops@example.com, or arn:aws:sns:us-east-1:123456789012:budget-alerts",
            )
    if budget.actions == "stop" and topics:
        yield Problem(
            "cost-budget",
            "the SNS topic to notify hears the 80% warning only: at the limit, the one SNS "
            "subscriber AWS Budgets allows is the stop function's topic",
            (*where, "notify"),
            hint="subscribe your topic's endpoints by email too, or subscribe them to the "
            "cluster's topic fmctl-NAME-budget",
            level="warning",
        )
    if budget.actions == "alert" and not budget.notify:
        yield Problem(
            "cost-budget",
            "the budget alerts nobody: notify is empty",
            (*where, "notify"),
            hint="add an email address or an SNS topic ARN, or actions: stop to have the "
            "cluster scaled to zero at the limit",
        )


#: The shortest cost.idle.after: a GPU node takes minutes to launch and join; idling less
#: than that before it is powered down only churns.
IDLE_MIN_SECONDS = 10 * 60


@rule("cost-idle")
def cost_idle(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """cost.idle.after is a duration of 10 minutes or more. scale-down needs a pool to act on
    (reserved capacity is paid anyway; a pool held at its full count by minCount has nothing
    to remove); on Slurm it sets Slurm's idle time, which slurm.scaledownIdletime must then
    not contradict; on EKS the Cluster Autoscaler removes the idle nodes."""
    idle = spec.cost.idle
    if idle is None:
        return
    where = ("cost", "idle")
    after = seconds(idle.after)
    if after is None or after < IDLE_MIN_SECONDS:
        yield Problem(
            "cost-idle",
            f"after: {idle.after!r} is not a duration of 10 minutes or more",
            (*where, "after"),
            hint="30m, 1h or 2h30m (days d, hours h, minutes m)",
        )
    if idle.action != "scale-down":
        return
    explicit = "scaledown_idletime" in spec.slurm.model_fields_set
    minutes = spec.slurm.scaledown_idletime
    if ctx.scheduler == "slurm" and explicit and after is not None and minutes * 60 != after:
        yield Problem(
            "cost-idle",
            f"slurm.scaledownIdletime ({minutes} min) and cost.idle.after ({idle.after}) both "
            "set when Slurm powers idle nodes down",
            ("slurm", "scaledownIdletime"),
            hint="remove slurm.scaledownIdletime: with action scale-down, cost.idle.after sets it",
            related=((*where, "after"),),
        )
    shrinkable = [
        p
        for p in spec.compute.gpu_pools
        if shrinks(p, ctx.scheduler, ctx.catalog) and (p.min_count or 0) < p.count
    ]
    if not shrinkable:
        ultra = "" if ctx.scheduler == "slurm" else ", or an UltraServer pool on EKS"
        yield Problem(
            "cost-idle",
            "no pool can scale down: each is reserved capacity (paid anyway: it only alerts) "
            f"or keeps its full count with minCount{ultra}",
            (*where, "action"),
            hint="an on-demand or spot pool without minCount (or a lower one) scales down",
            level="warning",
        )
