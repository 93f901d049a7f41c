"""`fmctl plan` and `up`: thin commands over ``provisioner.ops``."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from provisioner.cli import jsonout
from provisioner.cli.common import (
    GuardedCommand,
    _fail,
    _failures,
    _load,
    _notice,
    _prepare,
    _report,
    _target,
    fail_with,
)
from provisioner.cli.options import (
    output_option,
    spec_options,
    state_option,
    target_options,
    wait_option,
)
from provisioner.cli.report import print_problems

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
    "refuse": "!",
}


def show_plan(data: dict[str, Any], out: Any = None, show_unchanged: bool = False) -> None:
    """The plan as people read it: one line per resource that changes, each changed field
    (by the spec setting it comes from, where known; text as its changed lines), the ones
    that stay summed up in a line (``show_unchanged``: listed), then the waves and the
    critical path of what `up` runs."""
    echo = (lambda text: click.echo(text, file=out)) if out else click.echo
    echo(f"plan for {data['cluster']} ({data['region']}):")
    quiet = [c for c in data["changes"] if c["action"] in ("unchanged", "use")]
    for change in data["changes"]:
        action = change["action"]
        if change in quiet and not show_unchanged:
            continue
        what = f"  {_SIGN[action]:>3} {change['resource']:<34} {action}"
        if change.get("aws_id") and action in ("unchanged", "use", "delete", "drift"):
            what += f"  {change['aws_id']}"
        echo(what)
        for f in change["fields"]:
            for line in field_lines(f):
                echo(f"        {line}")
        if action == "refuse":
            echo(f"        {change['reason']}")
        elif change.get("reason") and action not in ("update",):
            echo(f"        ({change['reason']})")
        if change.get("loses"):
            echo(f"        lost: {change['loses']}")
        if change.get("hint"):
            echo(f"        hint: {change['hint']}")
    if quiet and not show_unchanged:
        used = sum(c["action"] == "use" for c in quiet)
        also = f" ({used} of them named by the spec, used as they are)" if used else ""
        echo(f"  {len(quiet)} resources unchanged{also}; --show-unchanged lists them")
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
    elif not data.get("refusals"):
        echo("nothing to do: the cluster is what the spec says")
    if data.get("refusals"):
        fields = ", ".join(
            f"{r['resource']} {r['field']} ({r['reason']})" for r in data["refusals"]
        )
        echo(f"up will refuse this plan and change nothing: {fields}")
    for note in data.get("notes", []):
        echo(f"note: {note}")
    capacity = data.get("capacity", {})
    for line in capacity.get("lines", []):
        echo(f"capacity: {line}")
    if capacity.get("unread"):
        echo(f"capacity: where the reservations sit is unknown ({capacity['unread']})")
    if data.get("cost"):
        for line in cost_lines(data["cost"]):
            echo(line)


def cost_lines(cost: dict[str, Any]) -> list[str]:
    """The plan's cost for people: the total per hour (and until the ttl), then each part
    with its price and source, or why it has none."""
    unpriced = [i for i in cost["items"] if i["hourly"] is None]
    least = "at least " if unpriced else ""
    total = f"cost: {least}${cost['hourly']:,.2f}/hour"
    if cost.get("untilTtl") is not None:
        total += f", {least}${cost['untilTtl']:,.2f} until the ttl ({cost['ttlHours']:g} h)"
    if cost["offline"]:
        total += f", from the price table shipped with fmctl ({cost['asOf']}; `plan` without"
        total += " --offline reads the AWS Price List)"
    else:
        total += ", at AWS's prices now"
    if unpriced:
        total += f"; {len(unpriced)} of {len(cost['items'])} parts unpriced, left out"
    lines = [total]
    for item in cost["items"]:
        head = f"  {item['resource']:<34} {item['description']}"
        if item["hourly"] is None:
            lines.append(f"{head}: unpriced ({item['unpriced']})")
            continue
        each = f" = {item['count']} x ${item['unitHourly']:,.4g}" if item["count"] != 1 else ""
        idle = f"; ${item['idleHourly']:,.2f}/hour idle" if "idleHourly" in item else ""
        lines.append(f"{head}: ${item['hourly']:,.2f}/hour{each}{idle}  [{item['source']}]")
        if item.get("note"):
            lines.append(f"      ({item['note']})")
    return lines


def field_lines(f: dict[str, Any]) -> list[str]:
    """One changed field for people: ``SPEC (field): before -> after``; a text of several
    lines as the lines that change (a unified diff), a set of changed settings (an object
    changed in the cluster) one line each."""
    mark = " (drift)" if f.get("drift") else ""
    how = "" if f["how"] == "update" else f"  [{f['how']}]"
    name = f"{f['spec']} ({f['path']})" if f.get("spec") else f["path"]
    before, after = f["from"], f["to"]
    if isinstance(before, dict) and isinstance(after, dict) and before.keys() == after.keys():
        lines = [f"{name}: {f['reason']}{how}{mark}"]
        for key in sorted(after):
            lines += ["  " + line for line in _value_lines(key, before[key], after[key])]
        return lines
    changed = _value_lines(name, before, after)
    changed[0] += f"{how}{mark}"
    if f.get("note"):
        changed.append(f"  ({f['note']})")
    return changed


def _value_lines(name: str, before: Any, after: Any) -> list[str]:
    if _multiline(before) or _multiline(after):
        import difflib

        old = before.splitlines() if isinstance(before, str) else []
        new = after.splitlines() if isinstance(after, str) else []
        diff = list(difflib.unified_diff(old, new, lineterm="", n=1))[2:]  # no file headers
        count = sum(1 for line in diff if line[:1] in "+-")
        return [f"{name}: {count} lines change"] + [f"  {line}" for line in diff]
    return [f"{name}: {_short(before)} -> {_short(after)}"]


def _multiline(value: Any) -> bool:
    return isinstance(value, str) and "\n" in value.strip()


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 90 else text[:87] + "..."


@click.command("plan", cls=GuardedCommand)
@spec_options
@click.option("--offline", is_flag=True, help="Do not look at what exists (no AWS calls).")
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help="Exit 2 when there are changes (0: none; 1: an error, or a change up would refuse).",
)
@click.option(
    "--show-unchanged", is_flag=True, help="List the resources that stay as they are too."
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@state_option
@target_options
def plan(
    path: str,
    scheduler: str | None,
    offline: bool,
    detailed_exitcode: bool,
    show_unchanged: bool,
    output: str,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Show what `up` would do to each resource, field by field; changes nothing."""
    validation = _load(path, scheduler)
    from provisioner.ops.engine import offline_view, plan_view

    spec = validation.resolved
    if offline:
        view = offline_view(spec)
    else:
        target = _target(spec.metadata.region, state_dir, sandbox, state_url)
        _prepare(validation, target, sandbox)
        view = plan_view(spec, target)
    data = view.as_data()
    if output == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        show_plan(data, show_unchanged=show_unchanged)
    # A plan `up` would refuse fails, as Terraform fails a plan it cannot apply.
    if view.plan.unreadable or view.plan.refused:
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
@click.option(
    "--wait-healthy",
    is_flag=True,
    help="Then wait until every GPU node is in service and healthy (`fmctl health`), and "
    "say how long it took; exit 1 if --healthy-timeout passes first.",
)
@click.option(
    "--healthy-timeout",
    type=click.IntRange(1),
    default=3600,
    show_default=True,
    metavar="SECONDS",
    help="How long --wait-healthy waits.",
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
    wait_healthy: bool,
    healthy_timeout: int,
    wait: bool,
    state_url: str | None,
    sandbox: bool,
    state_dir: str | None,
) -> None:
    """Make the cluster what the spec says: create, update, replace or delete; re-run to
    resume."""
    # The spec first: a bad one is refused before the engine (and its SDKs) is imported.
    validation = _load(path, scheduler)
    from provisioner.cli.progress import Progress
    from provisioner.ops.engine import PlanView, Refused
    from provisioner.ops.engine import up as run_up
    from provisioner.ops.errors import LockHeld
    from provisioner.ops.target import pcluster_command
    from provisioner.ops.validate import Validation

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
        if not acting or yes:
            said = ": nothing to change" if not acting else ":"
            click.echo(f"up {spec.metadata.name} in {where}{said}", err=as_json)
            for note in planned.notes:  # the plan's, which nobody was shown
                click.echo(f"note: {note}", err=True)
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
        fail_with(exc)
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
            _hand_over(path, spec, target, as_json=True)
        return
    _report(outcome.result, "up", [c.resource for c in outcome.pending])
    _summary(spec.metadata.name, outcome)
    _after_up(spec, target, outcome, sandbox)
    if wait_healthy:
        _wait_healthy(spec, target, healthy_timeout)
    if spec.scheduler == "kubernetes" and spec.kubernetes.in_cluster_stack == "gitops":
        _hand_over(path, spec, target)


def _wait_healthy(spec: Any, target: Any, timeout: int) -> None:
    """``--wait-healthy``: every GPU node in service and healthy, or exit 1 naming those
    that are not."""
    from provisioner.ops.check import CheckUnavailable, wait_healthy

    try:
        ok, seconds, report = wait_healthy(
            spec, target, timeout, lambda line: click.echo(f"health: {line}", err=True)
        )
    except CheckUnavailable as exc:
        fail_with(exc)
    nodes = sum(1 for n in report.nodes if n.state == "healthy")
    if ok:
        click.echo(f"healthy: {nodes} GPU nodes in service, {seconds:.1f} s after up")
        return
    stuck = [f"{n.name} {n.state}" for n in report.nodes if n.state != "healthy"]
    _fail(
        f"not every GPU node is healthy after {seconds:.0f} s"
        + (f": {', '.join(stuck[:10])}" if stuck else ""),
        f"`fmctl health {spec.metadata.name}` shows each node and its fault",
    )


def _hand_over(path: str, spec: Any, target: Any, as_json: bool = False) -> None:
    """``inClusterStack: gitops``: the deployment folder filled from the cluster just made,
    for the user to commit where Argo CD or Flux reads it (with ``-o json``, a JSON line:
    stdout holds nothing else)."""
    from provisioner.ops.render import render_to

    out = target.home / "clusters" / spec.metadata.name / "deployment"
    render_to(path, out, target_of=lambda _spec: target)
    where = spec.gitops.path or "the folder's place in the repository"
    if as_json:
        jsonout.line(
            {"gitops": {"folder": str(out), "repoUrl": spec.gitops.repo_url, "path": where}}
        )
        return
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
    from provisioner.cli.cluster_cmds import _print_kube, _print_topology
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
    elif "pcs/cluster" in outputs:
        from provisioner.ops.status import pcs_view

        seen, access = pcs_view(target, name)
        for line in [*(seen.lines() if seen else []), *access]:
            click.echo(line)
    elif sandbox:
        click.echo(
            "sandbox: the infrastructure exists in the local emulator; the "
            f"{spec.scheduler} cluster itself is not created in the sandbox."
        )
