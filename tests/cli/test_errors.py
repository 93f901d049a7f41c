"""One error family (issue 36): every failure the product defines is an ``FmctlError`` with a
hint, and the CLI turns any of them, and anything else a command meets, into the same
``error:``/``hint:`` lines, JSON under ``-o json`` and exit status 1, in one place."""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Iterator

import pytest

from provisioner import BUG_HINT, FmctlBug, FmctlError
from tests.conftest import ROOT
from tests.tools.inprocess import fmctl

#: Exception classes outside the family, and why a person never sees them as they are.
OUTSIDE = {
    # The emulator's API failures: it answers them as AWS or Kubernetes would (an error
    # response), which reach fmctl as AWS or Kubernetes errors.
    "fmctl_sandbox.budgets.BudgetsError": "an emulated API's error response",
    "fmctl_sandbox.crd_schema.RuleError": "an emulated API's error response",
    "fmctl_sandbox.eks_model.EksError": "an emulated API's error response",
    "fmctl_sandbox.kube_model.ApiError": "an emulated API's error response",
    "fmctl_sandbox.kube_policies._Erred": "an emulated API's error response",
    "fmctl_sandbox.pcs_model.PcsError": "an emulated API's error response",
    # The emulator's client hung up mid-request: the server drops the connection.
    "fmctl_sandbox.server.ClientGone": "the emulator's own connection handling",
    # The emulator, a separate program that imports nothing of fmctl: the CLI reports its
    # failure to start as ops.errors.SandboxUnavailable (as_error).
    "fmctl_sandbox.daemon.SandboxError": "reported as SandboxUnavailable",
    # botocore's ClientError for a code of known meaning, typed (drivers.aws_errors); one a
    # caller does not expect reaches the CLI as the ClientError it is, and is translated.
    **{
        f"provisioner.drivers.aws_errors.{name}": "a typed ClientError: translated at the CLI"
        for name in (
            "AwsProblem",
            "AccessDenied",
            "AlreadyExists",
            "BucketNotFound",
            "ConditionFailed",
            "Conflict",
            "InUse",
            "Invalid",
            "KeyNotFound",
            "NotFound",
            "QuotaExceeded",
            "Throttled",
            "Unset",
            "WrongState",
        )
    },
    # Caught inside the spec loader and turned into a located problem.
    "provisioner.spec.source._BuildError": "becomes a located validation problem",
}


def _exception_classes() -> Iterator[type[BaseException]]:
    """Every exception class of the two packages the wheel ships (the product and its
    sandbox)."""
    paths = [*(ROOT / "provisioner").rglob("*.py"), *(ROOT / "fmctl_sandbox").rglob("*.py")]
    for path in sorted(paths):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == name:
                yield obj


def test_every_failure_the_product_defines_is_of_the_family() -> None:
    found = {f"{c.__module__}.{c.__qualname__}": c for c in _exception_classes()}
    assert len(found) > 30  # the walk found the product's classes
    outside = sorted(n for n, c in found.items() if not issubclass(c, FmctlError))
    assert outside == sorted(OUTSIDE), (
        "derive it from provisioner.FmctlError (with a hint), or say in OUTSIDE why a person "
        f"never sees it: {sorted(set(outside) ^ set(OUTSIDE))}"
    )


def test_bugs_say_they_are_bugs_and_kinds_keep_their_hints() -> None:
    from provisioner.blueprint.model import BlueprintError
    from provisioner.drivers.aws import WriteRefused
    from provisioner.drivers.kube import KubeError
    from provisioner.graph.graph import CycleError
    from provisioner.render import RenderError
    from provisioner.resources.errors import ReadOnly

    for bug in (BlueprintError, CycleError, RenderError, WriteRefused):
        assert issubclass(bug, FmctlBug)
        assert bug("x").hint == BUG_HINT
    assert ReadOnly("x").hint == BUG_HINT
    assert FmctlError("x", "do y").hint == "do y" and FmctlError("x").hint is None
    # A Kubernetes failure's hint follows its status.
    assert "access entries" in (KubeError(403, "Forbidden", "no").hint or "")
    assert "again" in (KubeError(409, "Conflict", "changed").hint or "")
    assert KubeError(403, "Forbidden", "no").kind == "KubeError"


def _raises(exc: BaseException):  # type: ignore[no-untyped-def]
    def read_status(*_: object, **__: object) -> None:
        raise exc

    return read_status


def _client_error() -> BaseException:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": "UnauthorizedOperation", "Message": "not allowed"}}, "DescribeVpcs"
    )


def _sandbox_error() -> BaseException:
    from fmctl_sandbox.daemon import SandboxError

    return SandboxError("the sandbox did not start")


@pytest.mark.parametrize(
    ("raised", "kind", "message", "hint"),
    [
        (
            FmctlError("the state is gone", "run up again"),
            "FmctlError",
            "the state is gone",
            "run up again",
        ),
        (FmctlBug("a loop in the graph"), "FmctlBug", "a loop in the graph", BUG_HINT),
        (KeyError("zone"), "Unexpected", "fmctl status: KeyError: 'zone'", "FMCTL_DEBUG=1"),
        (_client_error(), "AwsError", "UnauthorizedOperation: not allowed", None),
        (_sandbox_error(), "SandboxUnavailable", "the sandbox did not start", "server.log"),
    ],
    ids=["own-kind", "bug", "unexpected", "aws", "sandbox"],
)
def test_the_cli_maps_every_failure_in_one_way(
    monkeypatch: pytest.MonkeyPatch,
    raised: BaseException,
    kind: str,
    message: str,
    hint: str | None,
) -> None:
    import provisioner.ops.status

    monkeypatch.setattr(provisioner.ops.status, "status", _raises(raised))
    text = fmctl("status", "demo", "--region", "us-west-2")
    assert text.returncode == 1 and "Traceback" not in text.stderr, text.stderr
    error, _, said = text.stderr.partition("\nhint: ")
    assert error.startswith("error: ") and message in error, text.stderr
    assert said.strip(), f"no hint: {text.stderr}"
    if hint is not None:
        assert hint in said

    as_json = fmctl("status", "demo", "--region", "us-west-2", "-o", "json")
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)["error"]
    assert data["kind"] == kind and message in data["message"] and data["hint"], data
