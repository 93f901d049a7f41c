"""`fmctl plan`, `up`, `down`, `status`, `topology`: thin commands over ``provisioner.ops``."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from provisioner.cli import jsonout
from provisioner.cli.options import (
    name_argument,
    output_option,
    region_option,
    spec_options,
    state_option,
    target_options,
    wait_option,
)
from provisioner.cli.report import print_problems, use_color


class GuardedCommand(click.Command):
    """A command whose unexpected errors print as one line with a hint, never a traceback
    (FMCTL_DEBUG=1 shows it). AWS errors are translated first."""

    def invoke(self, ctx: click.Context) -> Any:
        import os

        try:
            return super().invoke(ctx)
        except (
            click.exceptions.Exit,
            click.ClickException,
            click.exceptions.Abort,
            SystemExit,
            KeyboardInterrupt,
            BrokenPipeError,  # `| head`: main ends quietly
        ):
            raise
        except Exception as exc:
            if os.environ.get("FMCTL_DEBUG"):
                raise
            from provisioner.ops.errors import explain

            message, hint = explain(exc, f"fmctl {ctx.info_name}")
            _fail(
                message,
                hint
                or "FMCTL_DEBUG=1 shows the traceback; please report it if it looks like fmctl's",
            )


def _fail(message: str, hint: str | None = None) -> NoReturn:
    click.echo(f"error: {message}" + (f"\nhint: {hint}" if hint else ""), err=True)
    if jsonout.is_json():
        jsonout.error(message, hint)
    sys.exit(1)


def _load(path: str, scheduler: str | None) -> Any:
    """Validate offline; on errors print them and exit 1 before any AWS call."""
    from provisioner.ops.validate import load_and_validate

    result = load_and_validate(path, scheduler)
    print_problems(result, sys.stderr, color=use_color(sys.stderr))
    if not result.ok or result.resolved is None:
        _json_problems(result, "the spec")
        sys.exit(1)
    return result


def _target(region: str, state_dir: str | None, sandbox: bool, state_url: str | None = None) -> Any:
    from provisioner.ops.errors import BadStateUrl, SandboxError
    from provisioner.ops.target import home_of, target_for
    from provisioner.ops.team import parse_state_url

    try:
        state = parse_state_url(state_url) if state_url else None
    except BadStateUrl as exc:
        _fail(f"--state/FMCTL_STATE: {exc}", "write it as s3://BUCKET/PREFIX")
    try:
        target = target_for(region, home_of(state_dir), sandbox)
    except SandboxError as exc:
        _fail(str(exc))
    target.state = state
    return target


def missing_cluster(name: str, region: str) -> str:
    """How `status` and `down` say that a cluster does not exist."""
    return f"no cluster in {region} (nothing tagged fmctl.dev/cluster={name})"


def _notice(line: str) -> None:
    """A notice for the user (stderr: stdout stays data)."""
    click.echo(line, err=True)


def _online(validation: Any, target: Any) -> None:
    """Online checks; errors print located and exit 1 before anything is created."""
    from provisioner.ops.errors import explain
    from provisioner.ops.validate import check_online

    try:
        online = check_online(validation, target)
    except Exception as exc:  # botocore errors: translated, never a traceback
        _fail(*explain(exc, "checking the account"))
    print_problems(online, sys.stderr, color=use_color(sys.stderr))
    if not online.ok:
        _json_problems(online, "the account")
        sys.exit(1)


def _json_problems(result: Any, where: str) -> None:
    """Under -o json: the problems as one JSON error on stdout."""
    if not jsonout.is_json():
        return
    from provisioner.cli.report import problems_json

    errors = sum(p.level == "error" for p in result.problems)
    jsonout.error(
        f"{result.doc.name}: {errors} error(s) found checking {where}",
        "each problem says where and what to do",
        **problems_json(result),
    )


def _prepare(validation: Any, target: Any, sandbox: bool) -> None:
    """Seed the sandbox for the spec (said aloud), then the online checks."""
    if sandbox:
        from provisioner.ops.seed import seed_sandbox

        for line in seed_sandbox(validation.resolved, target):
            click.echo(f"sandbox: {line}", err=True)  # a notice: stdout stays data
    _online(validation, target)


_SIGN = {
    "create": "+",
    "update": "~",
    "drift": "~",
    "replace": "-/+",
    "delete": "-",
    "wait": "…",
    "unchanged": " ",
    "use": " ",
    "unreadable": "?",
}


def show_plan(data: dict[str, Any], out: Any = None) -> None:
    """The plan as people read it: one line per resource, each changed field, then the waves
    and the critical path of what `up` runs."""
    echo = (lambda text: click.echo(text, file=out)) if out else click.echo
    echo(f"plan for {data['cluster']} ({data['region']}):")
    for change in data["changes"]:
        action = change["action"]
        what = f"  {_SIGN[action]:>3} {change['resource']:<34} {action}"
        if change.get("aws_id") and action in ("unchanged", "use", "delete", "drift"):
            what += f"  {change['aws_id']}"
        echo(what)
        for f in change["fields"]:
            mark = " (drift)" if f.get("drift") else ""
            how = "" if f["how"] == "update" else f"  [{f['how']}]"
            echo(f"        {f['path']}: {_short(f['from'])} -> {_short(f['to'])}{how}{mark}")
        if change.get("reason") and action not in ("update",):
            echo(f"        ({change['reason']})")
        if change.get("loses"):
            echo(f"        lost: {change['loses']}")
        if change.get("hint"):
            echo(f"        hint: {change['hint']}")
    counts = data["counts"]
    summary = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    echo(f"{summary}")
    if data["waves"]:
        for i, wave in enumerate(data["waves"]):
            echo(f"  wave {i + 1} (in parallel): {', '.join(wave)}")
        echo(
            f"critical path ~{data['critical_path_s'] / 60:.0f} min: "
            f"{' -> '.join(data['critical_path'])}; one after another would take "
            f"~{data['serial_s'] / 60:.0f} min"
        )
    else:
        echo("nothing to do: the cluster is what the spec says")
    for note in data.get("notes", []):
        echo(f"note: {note}")


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 90 else text[:87] + "..."


@click.command("plan", cls=GuardedCommand)
@spec_options
@click.option("--offline", is_flag=True, help="Do not look at what exists (no AWS calls).")
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help="Exit 2 when there are changes (0: none, 1: an error).",
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@state_option
@target_options
def plan(
    path: str,
    scheduler: str | None,
    offline: bool,
    detailed_exitcode: bool,
    output: str,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Show what `up` would do to each resource, field by field; changes nothing."""
    from provisioner.ops.engine import PlanView, offline_plan, plan_cluster

    validation = _load(path, scheduler)
    spec = validation.resolved
    if offline:
        view = PlanView(offline_plan(spec), offline=True)
    else:
        target = _target(spec.metadata.region, state_dir, sandbox, state_url)
        _prepare(validation, target, sandbox)
        view = PlanView(plan_cluster(spec, target))
    data = view.as_data()
    if output == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        show_plan(data)
    if view.plan.unreadable:
        sys.exit(1)
    if detailed_exitcode and view.plan.acting:
        sys.exit(2)


@click.command("up", cls=GuardedCommand)
@spec_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@output_option
@click.option(
    "--allow-replace",
    is_flag=True,
    help="Replace what AWS cannot change in place (named, with what is lost, before asking).",
)
@wait_option
@state_option
@target_options
def up(
    path: str,
    scheduler: str | None,
    yes: bool,
    output: str,
    allow_replace: bool,
    wait: bool,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Make the cluster what the spec says: create, update, replace or delete; re-run to
    resume."""
    from provisioner.cli.progress import Progress
    from provisioner.ops.engine import PlanView, Refused
    from provisioner.ops.engine import up as run_up
    from provisioner.ops.errors import LockHeld
    from provisioner.ops.target import pcluster_command
    from provisioner.ops.validate import Validation

    validation = _load(path, scheduler)
    spec = validation.resolved
    target = _target(spec.metadata.region, state_dir, sandbox, state_url)
    if spec.scheduler == "slurm" and not sandbox and not pcluster_command(target):
        _fail(
            "a Slurm cluster needs ParallelCluster's `pcluster` command, and none was found",
            "run `fmctl setup parallelcluster` (a virtualenv of its own; it also needs "
            "Node.js), or put pcluster on PATH, or set FMCTL_PCLUSTER",
        )
    as_json = output == "json"
    if as_json and not yes:
        _fail("`up -o json` does not ask before changing resources", "pass --yes")
    _prepare(validation, target, sandbox)
    where = "the sandbox" if sandbox else f"AWS {spec.metadata.region}"

    def confirm(planned: Any) -> bool:
        acting = planned.acting
        if not acting:
            click.echo(f"up {spec.metadata.name} in {where}: nothing to change", err=as_json)
            return True
        if yes:
            click.echo(f"up {spec.metadata.name} in {where}:", err=as_json)
            return True
        show_plan(PlanView(planned).as_data())
        if not sys.stdin.isatty():
            _fail("`up` asks before changing resources", "pass --yes to run without asking")
        lost = [c.loses for c in acting if c.loses]
        for item in lost:
            click.echo(f"warning: this deletes {item}", err=True)
        if not click.confirm(f"apply {len(acting)} changes to {spec.metadata.name} in {where}?"):
            return False
        click.echo(f"up {spec.metadata.name} in {where}:")
        return True

    progress = jsonout.JsonEvents() if as_json else Progress()
    try:
        outcome = run_up(
            spec,
            validation.doc.text,
            target,
            progress,
            confirm,
            allow_replace,
            wait,
            _notice,
        )
    except LockHeld as exc:
        _fail(str(exc), exc.hint)
    except Refused as exc:
        print_problems(Validation(validation.doc, exc.problems), sys.stderr)
        _fail(
            f"`up` changed nothing: {len(exc.problems)} change(s) it will not make",
            "`fmctl plan` shows every change and why",
        )
    finally:
        progress.close()
    if outcome is None:
        _fail("nothing changed", None)
    if as_json:
        counts = _counts(outcome)
        ok = _report(outcome.result, "up", [c.resource for c in outcome.pending], exit=False)
        jsonout.line(
            {
                "summary": {
                    "cluster": spec.metadata.name,
                    "region": spec.metadata.region,
                    "ok": ok,
                    **counts,
                    "wall_s": round(outcome.result.wall, 1),
                    **_failures(outcome.result, [c.resource for c in outcome.pending]),
                }
            }
        )
        if not ok:
            sys.exit(1)
        if spec.scheduler == "kubernetes" and spec.kubernetes.in_cluster_stack == "gitops":
            _hand_over(path, spec, target)
        return
    _report(outcome.result, "up", [c.resource for c in outcome.pending])
    _summary(spec.metadata.name, outcome)
    _after_up(spec, target, outcome, sandbox)
    if spec.scheduler == "kubernetes" and spec.kubernetes.in_cluster_stack == "gitops":
        _hand_over(path, spec, target)


def _hand_over(path: str, spec: Any, target: Any) -> None:
    """``inClusterStack: gitops``: the deployment folder filled from the cluster just made,
    for the user to commit where Argo CD or Flux reads it."""
    from provisioner.ops.render import render_to

    out = target.home / "clusters" / spec.metadata.name / "deployment"
    render_to(path, out, target=target)
    where = spec.gitops.path or "the folder's place in the repository"
    click.echo(
        f"gitops: kubernetes/ is for Argo CD or Flux to apply; the filled folder is {out}: "
        f"commit it at {where} of {spec.gitops.repo_url} (or run `fmctl render -f {path} -o "
        "DIR --from-cluster` in your checkout), then apply gitops/ once"
    )


def _counts(outcome: Any) -> dict[str, int]:
    """Resources created, existing, updated, replaced and deleted by a run of `up`."""
    done = outcome.result.done
    counts = {
        v: sum(1 for x in done.values() if x == v)
        for v in ("created", "updated", "replaced", "deleted")
    }
    counts["existed"] = len(outcome.plan.blueprint.ids) - counts["created"] - counts["replaced"]
    return counts


def _summary(name: str, outcome: Any) -> None:
    counts = _counts(outcome)
    click.echo(
        f"{name}: {counts['created']} created, {counts['existed']} existed ("
        f"{counts['updated']} updated, {counts['replaced']} replaced, {counts['deleted']} "
        f"deleted), in {outcome.result.wall:.1f}s"
    )


def _after_up(spec: Any, target: Any, outcome: Any, sandbox: bool) -> None:
    """Where things are, and how to reach the cluster."""
    from provisioner.ops.status import kube_access, kube_status, slurm_access

    outputs = outcome.ctx.outputs
    for key in ("vpc", "subnet/private", "fsx", "bucket"):
        if key in outputs:
            click.echo(f"  {key}: {outputs[key].id}")
    cluster = outputs.get("parallelcluster")
    name = spec.metadata.name
    if cluster is not None and cluster.status == "VALIDATED":
        click.echo(
            f"sandbox: ParallelCluster's validators accepted {cluster.config}; its create "
            "is not run against the emulator (the stack needs resources moto lacks)."
        )
    elif cluster is not None:
        if spec.slurm.topology_aware:
            _print_topology(name, target, "text", True)
        grafana = spec.observability.prometheus and spec.observability.grafana
        for line in slurm_access(
            name,
            spec.metadata.region,
            cluster.head_node,
            cluster.head_ip,
            spec,
            grafana,
        ):
            click.echo(line)
    elif "kube-stack" in outputs:
        kube = kube_status(target, name)
        if kube is not None:
            _print_kube(kube)
        for line in kube_access(name, target.region, outputs["kube-stack"].kubeconfig):
            click.echo(line)
    elif sandbox:
        click.echo(
            "sandbox: the infrastructure exists in the local emulator; the "
            f"{spec.scheduler} cluster itself is not created in the sandbox."
        )


def _print_kube(kube: Any) -> None:
    click.echo(f"EKS: {kube.status}, Kubernetes {kube.version}")
    for addon, version, status in kube.addons:
        click.echo(f"  add-on {addon:<24} {version:<22} {status}")
    for pool, nodes in kube.pools:
        click.echo(f"  pool {pool}: {len(nodes)} nodes")
        for n in nodes:
            click.echo(
                f"    {n.name:<34} {'Ready' if n.ready else 'NotReady':<9} "
                f"gpu {n.gpus:>2}  efa {n.efa:>2}"
            )
    if kube.stack:
        click.echo("  stack:")
        for row in kube.stack:
            click.echo(f"    {row}")


def _failures(result: Any, pending: list[str] | None = None) -> dict[str, Any]:
    """What failed, what did not start and what is still to change, as data."""
    from provisioner.ops.errors import explain

    failed = []
    for node, error in result.failed.items():
        message, hint = explain(error, node)
        failed.append({"resource": node, "message": message, "hint": hint})
    return {"failed": failed, "not_started": list(result.skipped), "pending": pending or []}


def _report(result: Any, verb: str, pending: list[str] | None = None, exit: bool = True) -> bool:
    """Failures with what to do (stderr); exit 1 when any (``exit``), else False."""
    from provisioner.ops.errors import explain

    if result.ok:
        return True
    for node, error in result.failed.items():
        message, hint = explain(error, node)
        click.echo(f"error: {message}", err=True)
        if hint:
            click.echo(f"hint: {hint}", err=True)
    if result.skipped:
        click.echo(f"not started: {', '.join(result.skipped)}", err=True)
    if pending:
        click.echo(f"still to change: {', '.join(pending)}", err=True)
    click.echo(f"`fmctl {verb}` again resumes where this stopped.", err=True)
    if exit:
        sys.exit(1)
    return False


@click.command("down", cls=GuardedCommand)
@name_argument()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--skip-kubernetes-cleanup",
    is_flag=True,
    help="EKS: do not reach into the cluster to delete load balancers and volumes its "
    "controllers made (for an API this machine cannot reach; they may be left behind).",
)
@click.option(
    "--keep-state",
    is_flag=True,
    help="Keep the cluster's local folder (saved spec, state, event log); down removes it.",
)
@click.option(
    "--keep-logs",
    is_flag=True,
    help="Keep the EKS control-plane log group (untagged from the cluster, its retention "
    "still applies); down deletes it.",
)
@output_option
@region_option
@wait_option
@state_option
@target_options
def down(
    name: str,
    yes: bool,
    skip_kubernetes_cleanup: bool,
    keep_state: bool,
    keep_logs: bool,
    output: str,
    region: str,
    wait: bool,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Delete everything tagged as cluster NAME's, dependents first (works from tags alone)."""
    from provisioner.cli.progress import Progress
    from provisioner.ops.engine import down as run_down
    from provisioner.ops.engine import owned_by
    from provisioner.ops.errors import LockHeld
    from provisioner.ops.kubeconfig import forget_locally
    from provisioner.ops.teardown import data_notes

    as_json = output == "json"
    if as_json and not yes:
        _fail("`down -o json` does not ask before deleting", "pass --yes")
    target = _target(region, state_dir, sandbox, state_url)
    found = owned_by(target, name)
    if not found:
        # Said as `status` says it; `down` still succeeds: gone is what it was asked for
        # (a re-run after a down that stopped late converges), where `status` has nothing
        # to report and fails.
        click.echo(f"{name}: {missing_cluster(name, region)}: nothing to delete", err=as_json)
        # A down stopped after its last delete left these.
        local = forget_locally(target, name, keep_state)
        for line in local:
            click.echo(f"{name}: {line}", err=as_json)
        if as_json:
            jsonout.line(
                {
                    "summary": {
                        "cluster": name,
                        "region": region,
                        "ok": True,
                        "exists": False,
                        "deleted": 0,
                        "local": local,
                    }
                }
            )
        return
    notes = data_notes(target, found, keep_logs)
    keep = frozenset({"log-group"} if keep_logs else ())
    if not yes:
        if not sys.stdin.isatty():
            _fail("`down` asks before deleting", "pass --yes to run without asking")
        click.echo(f"down {name} in {region} deletes:")
        for o in sorted(found, key=lambda o: (o.kind, o.resource)):
            verb = "keeps " if o.kind in keep else ""
            click.echo(f"  {verb}{o.kind:<16} {o.resource:<24} {o.id}")
    # Said with --yes too: the one thing a teardown cannot give back.
    for line in notes:
        click.echo(f"warning: {line}" if not line.startswith("  ") else line, err=True)
    if not yes:
        click.confirm(f"delete {len(found)} resources of {name}?", abort=True)
    click.echo(f"down {name}:", err=as_json)
    progress = jsonout.JsonEvents() if as_json else Progress()
    try:
        result, found = run_down(
            name, target, progress, skip_kubernetes_cleanup, wait, _notice, keep
        )
    except LockHeld as exc:
        _fail(str(exc), exc.hint)
    finally:
        progress.close()
    ok = _report(result, f"down {name}", exit=not as_json)
    local = forget_locally(target, name, keep_state) if ok else []
    if as_json:
        jsonout.line(
            {
                "summary": {
                    "cluster": name,
                    "region": region,
                    "ok": ok,
                    "exists": True,
                    "deleted": len(found) if ok else len(result.done),
                    "wall_s": round(result.wall, 1),
                    "local": local,
                    **_failures(result),
                }
            }
        )
        if not ok:
            sys.exit(1)
        return
    click.echo(f"{name}: {len(found)} resources deleted in {result.wall:.1f}s")
    for line in local:
        click.echo(f"{name}: {line}")


@click.command("status", cls=GuardedCommand)
@name_argument()
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@region_option
@state_option
@target_options
def status(
    name: str,
    output: str,
    region: str,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """What cluster NAME has in AWS, from its tags (local state not needed)."""
    from provisioner.ops.status import status as read_status

    target = _target(region, state_dir, sandbox, state_url)
    seen = read_status(target, name)
    if output == "json":
        click.echo(json.dumps(seen.as_data(), indent=2))
        # As the text: a cluster that does not exist is a failed status.
        sys.exit(0 if seen.resources else 1)
    if not seen.resources:
        click.echo(f"{name}: {missing_cluster(name, region)}")
        sys.exit(1)
    click.echo(f"{name} in {region}: {len(seen.resources)} resources")
    for o in sorted(seen.resources, key=lambda o: (o.kind, o.resource)):
        click.echo(f"  {o.kind:<16} {o.resource:<24} {o.id}")
    if seen.slurm is not None:
        click.echo(f"ParallelCluster {name}: {seen.slurm.status}, head node {seen.slurm.head_node}")
        if seen.slurm.exporters:
            states = ", ".join(f"{n} {state}" for n, state in seen.slurm.exporters)
            click.echo(f"  head node exporters: {states}")
            if any(state != "ok" for _, state in seen.slurm.exporters):
                click.echo(
                    "  (an exporter that could not be installed leaves its dashboards empty; "
                    f"`fmctl check {name}` reports the compute nodes')"
                )
    if seen.kube is not None:
        _print_kube(seen.kube)
    for line in seen.access:
        click.echo(line)


@click.command("topology", cls=GuardedCommand)
@name_argument()
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("--no-publish", is_flag=True, help="Only show it; do not upload topology.json.")
@region_option
@target_options
def topology(
    name: str, output: str, no_publish: bool, region: str, sandbox: bool, state_dir: str | None
) -> None:
    """Read where NAME's running compute nodes sit in the network and publish it for the head
    node, which rewrites Slurm's topology.conf from it (every 2 minutes). Nothing is
    published when no node is placed; on EKS, nodes carry their place as labels."""
    target = _target(region, state_dir, sandbox)
    _print_topology(name, target, output, not no_publish)


def _print_topology(name: str, target: Any, output: str, upload: bool) -> None:
    from provisioner.ops.topology import publish_topology

    published = publish_topology(target, name, upload)
    if output == "json":
        click.echo(json.dumps({**published.document, "publishedTo": published.where}, indent=2))
        return
    for line in published.lines:
        click.echo(f"topology: {line}")
    if published.where:
        click.echo(
            f"topology: published {published.where}; the head node installs topology.conf from it"
        )


@click.group("sandbox")
def sandbox() -> None:
    """The local AWS emulator used by --sandbox."""


@sandbox.command("stop", cls=GuardedCommand)
@click.option("--state-dir", envvar="FMCTL_HOME", metavar="DIR")
def sandbox_stop(state_dir: str | None) -> None:
    """Stop the emulator (its state goes with it)."""
    from provisioner.ops.target import home_of, stop_sandbox

    click.echo("sandbox stopped" if stop_sandbox(home_of(state_dir)) else "no sandbox running")
