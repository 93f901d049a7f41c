"""What every command that reaches AWS shares: errors as one line with a hint (JSON too
under -o json), the spec loaded and checked offline then online, the target, and how a run's
failures are reported."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import click

from provisioner.cli import jsonout
from provisioner.cli.report import print_problems, use_color


class GuardedCommand(click.Command):
    """A command whose failures print as ``error:`` and ``hint:`` lines (and JSON under -o
    json) with exit status 1, never a traceback (FMCTL_DEBUG=1 shows it): the one place
    that maps fmctl's error family (``provisioner.FmctlError``) to what a person sees."""

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
            from provisioner.ops.errors import as_error

            fail_with(as_error(exc, f"fmctl {ctx.info_name}"))


def fail_with(error: Any) -> NoReturn:
    """Report one of fmctl's errors (an ``FmctlError``) and exit 1."""
    _fail(str(error), error.hint, error.kind)


def _fail(message: str, hint: str | None = None, kind: str | None = None) -> NoReturn:
    click.echo(f"error: {message}" + (f"\nhint: {hint}" if hint else ""), err=True)
    if jsonout.is_json():
        jsonout.error(message, hint, **({"kind": kind} if kind else {}))
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
    from provisioner.ops.errors import BadStateUrl, SandboxUnavailable, as_error
    from provisioner.ops.target import home_of, target_for
    from provisioner.ops.team import parse_state_url

    try:
        state = parse_state_url(state_url) if state_url else None
    except BadStateUrl as exc:
        _fail(f"--state/FMCTL_STATE: {exc}", exc.hint, exc.kind)
    from provisioner.ops.errors import BadTimeScale

    try:
        target = target_for(region, home_of(state_dir), sandbox)
    except (SandboxUnavailable, BadTimeScale) as exc:
        fail_with(as_error(exc, "fmctl"))
    target.state = state
    return target


def missing_cluster(name: str, region: str) -> str:
    """How `status` and `down` say that a cluster does not exist."""
    return f"no cluster in {region} (nothing tagged fmctl.dev/cluster={name})"


@contextlib.contextmanager
def reading_regions(regions: Sequence[str], every: bool) -> Iterator[None]:
    """Around a read of ``regions`` (``every``: --all-regions), say on stderr how many are
    read at once and how long it took; one region is read without a word."""
    import time

    from provisioner.ops.gc import REGIONS_IN_FLIGHT

    started = time.monotonic()
    if every:
        click.echo(f"reading {len(regions)} regions, {REGIONS_IN_FLIGHT} at a time...", err=True)
    yield
    if every:
        click.echo(f"read {len(regions)} regions in {time.monotonic() - started:.1f}s", err=True)


def _notice(line: str) -> None:
    """A notice for the user (stderr: stdout stays data)."""
    click.echo(line, err=True)


def _online(validation: Any, target: Any) -> None:
    """Online checks; errors print located and exit 1 before anything is created."""
    from provisioner.ops.errors import as_error
    from provisioner.ops.validate import check_online

    try:
        online = check_online(validation, target)
    except Exception as exc:  # noqa: BLE001 - botocore errors: translated, never a traceback
        fail_with(as_error(exc, "checking the account"))
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


def _failures(result: Any, pending: list[str] | None = None) -> dict[str, Any]:
    """What failed, what did not start and what is still to change, as data."""
    from provisioner.ops.errors import as_error

    failed = []
    for node, error in result.failed.items():
        known = as_error(error, node)
        failed.append(
            {"resource": node, "message": str(known), "hint": known.hint, "kind": known.kind}
        )
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
