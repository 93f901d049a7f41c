"""`fmctl plan`, `up`, `down`, `status`: thin commands over ``provisioner.ops.engine``."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from provisioner.cli.options import region_option, spec_options, target_options
from provisioner.cli.report import print_problems


class GuardedCommand(click.Command):
    """A command whose unexpected errors print as one line with a hint, never a traceback
    (FMCTL_DEBUG=1 shows it). AWS errors are translated first."""

    def invoke(self, ctx: click.Context) -> Any:
        import os

        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:
            if os.environ.get("FMCTL_DEBUG"):
                raise
            from provisioner.drivers.aws import translate

            error = translate(exc, f"fmctl {ctx.info_name}")
            hint = error.hint or (
                "FMCTL_DEBUG=1 shows the traceback; please report it if it looks like fmctl's"
            )
            _fail(str(error), hint)


def _fail(message: str, hint: str | None = None) -> NoReturn:
    click.echo(f"error: {message}" + (f"\nhint: {hint}" if hint else ""), err=True)
    sys.exit(1)


def _load(path: str, scheduler: str | None) -> Any:
    """Validate offline; on errors print them and exit 1 before any AWS call."""
    from provisioner.ops.validate import load_and_validate

    result = load_and_validate(path, scheduler)
    print_problems(result, sys.stderr, color=sys.stderr.isatty())
    if not result.ok or result.resolved is None:
        sys.exit(1)
    return result


def _target(region: str, state_dir: str | None, sandbox: bool) -> Any:
    from provisioner.ops.engine import target_for
    from provisioner.sandbox.daemon import SandboxError
    from provisioner.state.store import fmctl_home

    try:
        return target_for(region, fmctl_home(state_dir), sandbox)
    except SandboxError as exc:
        _fail(str(exc))


def _online(validation: Any, target: Any) -> None:
    """Online checks; errors print located and exit 1 before anything is created."""
    from provisioner.catalog import load_catalog
    from provisioner.drivers.aws import AwsError, translate
    from provisioner.validate import Validation
    from provisioner.validate.online import online_problems

    try:
        problems = online_problems(target.aws(), validation.resolved, load_catalog())
    except AwsError as exc:
        _fail(str(exc), exc.hint)
    except Exception as exc:  # botocore errors: translated, never a traceback
        error = translate(exc, "checking the account")
        _fail(str(error), error.hint)
    online = Validation(validation.doc, problems)
    print_problems(online, sys.stderr, color=sys.stderr.isatty())
    if not online.ok:
        sys.exit(1)


def _seed_sandbox(validation: Any, target: Any) -> None:
    """In the sandbox, the reservations a spec names exist (matching it) unless a test
    seeded them first; say so, so nobody mistakes it for a real reservation."""
    from provisioner.sandbox import daemon

    info = daemon.running(target.home)
    assert info is not None, "the sandbox was started moments ago"
    spec = validation.resolved
    ec2 = target.aws().client("ec2")
    for pool in spec.compute.gpu_pools:
        rid = pool.capacity.reservation_id
        if rid is None:
            continue
        try:
            ec2.describe_capacity_reservations(CapacityReservationIds=[rid])
            continue
        except Exception:  # not there yet: seed it
            pass
        daemon.control(
            info,
            "/_fmctl/seed/reservation",
            {
                "capacityReservationId": rid,
                "instanceType": pool.instance_type,
                "availabilityZone": spec.network.availability_zone,
                "totalInstanceCount": pool.count,
                "availableInstanceCount": pool.count,
                "state": "active",
                "reservationType": "capacity-block"
                if pool.capacity.type == "capacity-block"
                else "default",
            },
        )
        click.echo(
            f"sandbox: seeded {rid} ({pool.count} x {pool.instance_type} in "
            f"{spec.network.availability_zone})"
        )
    _seed_data_bucket(spec, target)
    _seed_parallelcluster_images(spec, target, info)


def _seed_data_bucket(spec: Any, target: Any) -> None:
    """The S3 bucket a file system links stands for the user's data: in the sandbox it is
    created (untagged, so no `down` ever deletes it) when missing, and said so."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.s3 is None or fsx.file_system_id is not None:
        return
    s3 = target.aws().client("s3")
    for uri in (fsx.s3.import_path, fsx.s3.export_path):
        bucket = str(uri or "").removeprefix("s3://").split("/", 1)[0]
        if not bucket:
            continue
        try:
            s3.head_bucket(Bucket=bucket)
            continue
        except Exception:  # not there yet: make it
            pass
        where = spec.metadata.region
        extra = (
            {}
            if where == "us-east-1"
            else {"CreateBucketConfiguration": {"LocationConstraint": where}}
        )
        try:
            s3.create_bucket(Bucket=bucket, **extra)
        except Exception as exc:  # another sandbox run made it meanwhile
            from provisioner.drivers.aws import error_code

            if error_code(exc) != "BucketAlreadyOwnedByYou":
                raise
            continue
        click.echo(f"sandbox: created data bucket {bucket} (it stands for yours; never deleted)")


def _seed_parallelcluster_images(spec: Any, target: Any, info: dict[str, Any]) -> None:
    """ParallelCluster's validators look its official AMI up among Amazon's images, by its
    version; the emulator has none, so the sandbox registers one per architecture."""
    from provisioner.drivers.pcluster import IMAGE_OS_PART, ParallelCluster, PclusterError
    from provisioner.ops.engine import pcluster_command, sandbox_validates_only
    from provisioner.sandbox import daemon

    command = pcluster_command(target)
    if spec.scheduler != "slurm" or command is None or not sandbox_validates_only(target):
        return
    try:
        version = ParallelCluster(command, spec.metadata.region).version()
    except PclusterError as exc:
        _fail(str(exc), "check the ParallelCluster install: `fmctl setup parallelcluster`")
    for arch in ("x86_64", "arm64"):
        name = f"aws-parallelcluster-{version}-{IMAGE_OS_PART[spec.slurm.os]}-{arch}-fmctl-sandbox"
        daemon.control(
            info,
            "/_fmctl/seed/image",
            {"region": spec.metadata.region, "name": name, "architecture": arch},
        )


@click.command("plan", cls=GuardedCommand)
@spec_options
@click.option("--offline", is_flag=True, help="Do not look at what exists (no AWS calls).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@target_options
def plan(
    path: str,
    scheduler: str | None,
    offline: bool,
    output: str,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Show what `up` would do: resources, dependencies, what exists, what runs in parallel."""
    from provisioner.ops.engine import plan_view

    validation = _load(path, scheduler)
    spec = validation.resolved
    target = None if offline else _target(spec.metadata.region, state_dir, sandbox)
    if target is not None:
        if sandbox:
            _seed_sandbox(validation, target)
        _online(validation, target)
    data = plan_view(spec, target).as_data()
    if output == "json":
        click.echo(json.dumps(data, indent=2))
        return
    exists = {r["id"]: r["exists"] for r in data["resources"]}
    click.echo(f"plan for {spec.metadata.name} ({spec.scheduler}, {spec.metadata.region}):")
    for i, wave in enumerate(data["waves"]):
        click.echo(f"  wave {i + 1} (in parallel):")
        for rid in wave:
            state = {True: "exists", False: "create", None: "create?"}[exists[rid]]
            click.echo(f"    {state:<8} {rid}")
    critical = data["criticalPath"]
    click.echo(
        f"critical path ~{critical['seconds'] / 60:.0f} min: "
        f"{' -> '.join(critical['resources'])}; one after another would take "
        f"~{data['serialSeconds'] / 60:.0f} min"
    )


@click.command("up", cls=GuardedCommand)
@spec_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@target_options
def up(path: str, scheduler: str | None, yes: bool, sandbox: bool, state_dir: str | None) -> None:
    """Create the cluster (infrastructure, then the Slurm cluster); re-run to resume."""
    from provisioner.cli.progress import Progress
    from provisioner.ops.engine import pcluster_command, plan_view
    from provisioner.ops.engine import up as run_up
    from provisioner.state.store import LockHeld

    validation = _load(path, scheduler)
    spec = validation.resolved
    target = _target(spec.metadata.region, state_dir, sandbox)
    if spec.scheduler == "slurm" and not sandbox and not pcluster_command(target):
        _fail(
            "a Slurm cluster needs ParallelCluster's `pcluster` command, and none was found",
            "run `fmctl setup parallelcluster` (a virtualenv of its own; it also needs "
            "Node.js), or put pcluster on PATH, or set FMCTL_PCLUSTER",
        )
    if sandbox:
        _seed_sandbox(validation, target)
    _online(validation, target)
    view = plan_view(spec, None)
    count = len(view.plan.nodes)
    where = "the sandbox" if sandbox else f"AWS {spec.metadata.region}"
    if not yes:
        if not sys.stdin.isatty():
            _fail("`up` asks before creating resources", "pass --yes to run without asking")
        click.confirm(
            f"create or check {count} resources of {spec.metadata.name} in {where}?", abort=True
        )
    click.echo(f"up {spec.metadata.name} in {where}:")
    try:
        result, engine = run_up(spec, validation.doc.text, target, Progress())
    except LockHeld as exc:
        _fail(str(exc))
    _report(result, "up")
    created = sum(1 for s in result.done.values() if s == "created")
    click.echo(
        f"{spec.metadata.name}: {created} created, {len(result.done) - created} "
        f"existed, in {result.wall:.1f}s"
    )
    for key in ("vpc", "subnet/private", "fsx", "bucket"):
        if key in engine.outputs:
            click.echo(f"  {key}: {engine.outputs[key]['id']}")
    cluster = engine.outputs.get("parallelcluster")
    if cluster and cluster.get("status") == "VALIDATED":
        click.echo(
            f"sandbox: ParallelCluster's validators accepted {cluster['config']}; its create "
            "is not run against the emulator (the stack needs resources moto lacks)."
        )
    elif cluster:
        if spec.slurm.topology_aware:
            publish_topology(spec.metadata.name, target)
        grafana = spec.observability.prometheus and spec.observability.grafana
        _access(spec.metadata.name, spec.metadata.region, cluster, spec.network.ssh_cidr, grafana)
    elif "kube-stack" in engine.outputs:
        from provisioner.cli.kube_cmds import kubernetes_summary

        kubernetes_summary(spec.metadata.name, target, engine.outputs["kube-stack"]["kubeconfig"])
    elif sandbox:
        click.echo(
            "sandbox: the infrastructure exists in the local emulator; the "
            f"{spec.scheduler} cluster itself is not created in the sandbox."
        )


def _access(
    name: str, region: str, cluster: dict[str, Any], ssh: str | None, grafana: bool
) -> None:
    """How to log in to the head node and reach Grafana on it (`up` and `status`)."""
    head = cluster.get("head_node", "")
    how = (
        f"ssh ec2-user@{cluster.get('head_ip')}"
        if ssh
        else f"aws ssm start-session --target {head}"
    )
    click.echo(f"log in: {how}   (Slurm head node of {name})")
    if grafana:
        click.echo(
            f"grafana: aws ssm start-session --target {head} --region {region} --document-name "
            'AWS-StartPortForwardingSession --parameters \'{"portNumber":["3000"],'
            '"localPortNumber":["3000"]}\'  then http://localhost:3000 (user admin; the '
            "password is in /etc/fmctl/grafana-admin on the head node, never on this machine)"
        )


def _report(result: Any, verb: str) -> None:
    """Failures with what to do; exit 1 when any."""
    from provisioner.drivers.aws import translate

    if result.ok:
        return
    for node, error in result.failed.items():
        translated = translate(error, node)
        click.echo(f"error: {translated}", err=True)
        if translated.hint:
            click.echo(f"hint: {translated.hint}", err=True)
    if result.skipped:
        click.echo(f"not started: {', '.join(result.skipped)}", err=True)
    click.echo(f"`fmctl {verb}` again resumes where this stopped.", err=True)
    sys.exit(1)


@click.command("down", cls=GuardedCommand)
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--skip-kubernetes-cleanup",
    is_flag=True,
    help="EKS: do not reach into the cluster to delete load balancers and volumes its "
    "controllers made (for an API this machine cannot reach; they may be left behind).",
)
@region_option
@target_options
def down(
    name: str,
    yes: bool,
    skip_kubernetes_cleanup: bool,
    region: str,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Delete everything tagged as cluster NAME's, dependents first (works from tags alone)."""
    from provisioner.cli.progress import Progress
    from provisioner.ops.engine import down as run_down
    from provisioner.ops.engine import find_owned, make_engine
    from provisioner.state.store import LockHeld

    target = _target(region, state_dir, sandbox)
    found = find_owned(make_engine(target, name, None, lambda e: None))
    if not found:
        click.echo(f"{name}: nothing tagged fmctl.dev/cluster={name} in {region}")
        return
    if not yes:
        if not sys.stdin.isatty():
            _fail("`down` asks before deleting", "pass --yes to run without asking")
        click.confirm(f"delete {len(found)} resources of {name}?", abort=True)
    click.echo(f"down {name}:")
    try:
        result, found = run_down(name, target, Progress(), skip_kubernetes_cleanup)
    except LockHeld as exc:
        _fail(str(exc))
    _report(result, f"down {name}")
    click.echo(f"{name}: {len(found)} resources deleted in {result.wall:.1f}s")


@click.command("status", cls=GuardedCommand)
@click.argument("name")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@region_option
@target_options
def status(name: str, output: str, region: str, sandbox: bool, state_dir: str | None) -> None:
    """What cluster NAME has in AWS, from its tags (local state not needed)."""
    from provisioner.ops.engine import find_owned, make_engine

    target = _target(region, state_dir, sandbox)
    found = find_owned(make_engine(target, name, None, lambda e: None))
    rows = [{"kind": f.kind, "resource": f.logical_id, "id": f.id} for f in found]
    if output == "json":
        click.echo(json.dumps({"cluster": name, "region": region, "resources": rows}, indent=2))
        return
    if not rows:
        click.echo(f"{name}: no resources in {region}")
        sys.exit(1)
    click.echo(f"{name} in {region}: {len(rows)} resources")
    for row in sorted(rows, key=lambda r: (r["kind"], r["resource"])):
        click.echo(f"  {row['kind']:<16} {row['resource']:<24} {row['id']}")
    if any(f.kind == "parallelcluster" for f in found):
        _slurm_access(name, target)
    if any(f.kind == "eks-cluster" for f in found):
        from provisioner.cli.kube_cmds import kubernetes_summary
        from provisioner.ops.engine import kubeconfig_path

        kubernetes_summary(name, target, str(kubeconfig_path(target, name)))


def _slurm_access(name: str, target: Any) -> None:
    """The head node's state, login and Grafana, with the spec `up` saved (when there is one)."""
    from provisioner.drivers.pcluster import ParallelCluster
    from provisioner.ops.engine import pcluster_command
    from provisioner.spec.source import parse_source
    from provisioner.state.store import ClusterState
    from provisioner.validate import validate_document

    command = pcluster_command(target)
    found = (
        ParallelCluster(command, target.region, env=target.aws().child_env()).describe(name)
        if command
        else None
    )
    if not found:
        return
    head = found.get("headNode", {})
    cluster = {
        "head_node": head.get("instanceId", ""),
        "head_ip": head.get("publicIpAddress") or head.get("privateIpAddress", ""),
    }
    click.echo(
        f"ParallelCluster {name}: {found['clusterStatus']}, head node {cluster['head_node']}"
    )
    text = ClusterState(target.home, name).spec_text()
    spec = validate_document(parse_source(text)[0]).resolved if text else None
    ssh = spec.network.ssh_cidr if spec else None
    grafana = bool(spec and spec.observability.prometheus and spec.observability.grafana)
    _access(name, target.region, cluster, ssh, grafana)


@click.command("topology", cls=GuardedCommand)
@click.argument("name")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("--no-publish", is_flag=True, help="Only show it; do not upload topology.json.")
@region_option
@target_options
def topology(
    name: str, output: str, no_publish: bool, region: str, sandbox: bool, state_dir: str | None
) -> None:
    """Read where NAME's running compute nodes sit in the network and publish it for the head
    node, which rewrites Slurm's topology.conf from it (every 2 minutes)."""
    target = _target(region, state_dir, sandbox)
    publish_topology(name, target, output, not no_publish)


def publish_topology(name: str, target: Any, output: str = "text", upload: bool = True) -> None:
    """`fmctl topology`, also run by `up` once a topology-aware Slurm cluster exists."""
    from provisioner.drivers.storage import artifact_bucket
    from provisioner.ops import topology as topo
    from provisioner.ops.engine import make_engine

    aws = target.aws()
    placed = topo.read_topology(aws, name)
    doc = topo.document(name, placed)
    where = None
    if upload:
        bucket = artifact_bucket(make_engine(target, name, None, lambda e: None))
        where = topo.publish(aws, bucket, name, doc)
    if output == "json":
        click.echo(json.dumps({**doc, "publishedTo": where}, indent=2))
        return
    for line in topo.summary(placed):
        click.echo(f"topology: {line}")
    if where:
        click.echo(f"topology: published {where}; the head node installs topology.conf from it")


@click.group("sandbox")
def sandbox() -> None:
    """The local AWS emulator used by --sandbox."""


@sandbox.command("stop", cls=GuardedCommand)
@click.option("--state-dir", envvar="FMCTL_HOME", metavar="DIR")
def sandbox_stop(state_dir: str | None) -> None:
    """Stop the emulator (its state goes with it)."""
    from provisioner.sandbox.daemon import stop
    from provisioner.state.store import fmctl_home

    click.echo("sandbox stopped" if stop(fmctl_home(state_dir)) else "no sandbox running")
