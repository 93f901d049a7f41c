"""The budget's stop function: an AWS Lambda function, subscribed to the budget's SNS topic,
that scales every GPU node group to zero when AWS Budgets says the budget is spent
(``templates/functions/budget_stop.py``, with the calls it makes beside it as
``calls.json``), and its log group.

AWS Lambda (API 2015-03-31, botocore's model and the Developer Guide):

- CreateFunction of a name that exists answers ResourceConflictException; a role IAM has
  not yet spread answers InvalidParameterValueException ("cannot be assumed by Lambda"),
  which clears within seconds; a new function is Pending, then Active. An update is
  InProgress, then Successful (LastUpdateStatus), and the next update waits for it.
- ``CodeSha256`` is the base64 SHA-256 of the deployment package: fmctl builds the package
  byte for byte the same every time (fixed times and modes), so a changed call is a
  changed hash, and nothing else is.
- SNS invokes the function only if its policy lets ``sns.amazonaws.com`` for that topic
  (AddPermission with ``SourceArn``); the subscription (protocol ``lambda``) needs no
  confirmation. Subscribe of the same endpoint twice returns the one subscription.
- Lambda writes to ``/aws/lambda/NAME``, and makes it if it is missing, untagged and kept
  forever: fmctl makes it first, tagged, with a retention, so `down` finds and removes it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from provisioner.drivers.aws_errors import AlreadyExists, Conflict, NotFound, WrongState
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.resources.base import (
    FieldChange,
    How,
    Kind,
    Observed,
    Owned,
    Policy,
    Request,
    policies,
)
from provisioner.resources.context import Context
from provisioner.resources.errors import Foreign, ResourceError
from provisioner.resources.iam import RoleOut
from provisioner.resources.schedules import StopCall, filled
from provisioner.resources.tags import CREATED_TAG, RESOURCE_TAG, DesiredTags, Tags, tag_updates
from provisioner.resources.topics import TopicOut
from provisioner.shipped import shipped_dir

if TYPE_CHECKING:
    from types_boto3_lambda.type_defs import GetFunctionResponseTypeDef

RUNTIME: Final = "python3.12"
HANDLER = "budget_stop.handler"
#: Days its log group keeps what the function said.
LOG_DAYS = 30
PERMISSION = "fmctl-budget-topic"


def log_group(function: str) -> str:
    """Where Lambda writes the function's output."""
    return f"/aws/lambda/{function}"


def package(calls: list[dict[str, Any]]) -> bytes:
    """The deployment package: the handler and its calls, the same bytes for the same
    calls."""
    source = (shipped_dir("templates") / "functions" / "budget_stop.py").read_bytes()
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in (
            ("budget_stop.py", source),
            ("calls.json", json.dumps(calls, sort_keys=True, indent=1).encode()),
        ):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return body.getvalue()


def code_sha(data: bytes) -> str:
    """Lambda's CodeSha256 of a package."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


@dataclass(frozen=True)
class FunctionParams:
    """The stop function: its name, role, the topic it listens on and the calls it makes."""

    function_name: str
    role: Ref[RoleOut]
    topic: Ref[TopicOut]
    calls: tuple[StopCall, ...]
    tags: DesiredTags


@dataclass(frozen=True)
class FunctionOut:
    """The function by name, and its ARN."""

    id: str
    arn: str


@dataclass(frozen=True)
class FunctionLive:
    """What fmctl manages of the function."""

    code: str
    role: str
    runtime: str
    #: The topics it is subscribed to.
    topics: frozenset[str]
    tags: Tags


class Function(Kind[FunctionParams, FunctionOut, FunctionLive]):
    """The budget's stop function, its subscription to the topic, and its log group."""

    name, params, outputs = "function", FunctionParams, FunctionOut
    create_seconds, update_seconds, delete_seconds = 5.0, 3.0, 2.0
    policy = policies(
        code=Policy(How.UPDATE, "UpdateFunctionCode replaces the package in place"),
        role=Policy(How.UPDATE, "UpdateFunctionConfiguration changes the role in place"),
        runtime=Policy(How.UPDATE, "UpdateFunctionConfiguration changes the runtime in place"),
        topics=Policy(How.UPDATE, "the subscription is made or removed"),
    )

    # -- reading ------------------------------------------------------------------------
    def _get(self, ctx: Context, name: str) -> GetFunctionResponseTypeDef | None:
        try:
            found = ctx.aws.client("lambda").get_function(FunctionName=name)
        except NotFound:
            return None
        return found

    @staticmethod
    def _subscribed(ctx: Context, arn: str) -> frozenset[str]:
        sns, out = ctx.aws.client("sns"), set()
        for page in sns.get_paginator("list_subscriptions").paginate():
            for item in page.get("Subscriptions", []):
                if item.get("Protocol") == "lambda" and item.get("Endpoint") == arn:
                    out.add(str(item["TopicArn"]))
        return frozenset(out)

    def read(self, req: Request[FunctionParams]) -> Observed[FunctionOut, FunctionLive] | None:
        found = self._get(req.ctx, req.params.function_name)
        if found is None:
            return None
        tags = Tags.of(found.get("Tags") or {})
        if not req.ctx.ours(tags.as_dict()):
            raise Foreign(
                f"Lambda function {req.params.function_name} exists and is not fmctl cluster "
                f"{req.ctx.cluster}'s",
                hint="delete it (aws lambda delete-function) or pick another cluster name",
            )
        config = found["Configuration"]
        arn = str(config["FunctionArn"])
        live = FunctionLive(
            str(config.get("CodeSha256", "")),
            str(config.get("Role", "")),
            str(config.get("Runtime", "")),
            self._subscribed(req.ctx, arn),
            tags,
        )
        state = str(config.get("State", "Active"))
        pending = None if state == "Active" else state
        return Observed(
            FunctionOut(req.params.function_name, arn), live, req.params.function_name, pending
        )

    def _calls(self, ctx: Context, params: FunctionParams) -> list[dict[str, Any]] | None:
        """The calls with the ids they name filled in; None while one is not known."""
        out = []
        for call in params.calls:
            text = filled(ctx, call)
            if text is UNKNOWN:
                return None
            out.append({"action": call.action, "input": json.loads(text)})
        return out

    def desired(
        self, req: Request[FunctionParams], observed: Observed[FunctionOut, FunctionLive]
    ) -> FunctionLive:
        calls = self._calls(req.ctx, req.params)
        role, topic = (
            req.ctx.resolve(req.params.role, "arn"),
            req.ctx.resolve(req.params.topic, "arn"),
        )
        return FunctionLive(
            UNKNOWN if calls is None else code_sha(package(calls)),
            UNKNOWN if role is UNKNOWN else str(role),
            RUNTIME,
            UNKNOWN if topic is UNKNOWN else frozenset({str(topic)}),
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    # -- acting -------------------------------------------------------------------------
    def _log_group(self, ctx: Context, params: FunctionParams) -> None:
        logs, name = ctx.aws.client("logs"), log_group(params.function_name)
        try:
            logs.create_log_group(logGroupName=name, tags=params.tags.at_creation())
        except AlreadyExists as exc:
            tags = logs.list_tags_log_group(logGroupName=name).get("tags", {})
            if not ctx.ours(tags):
                raise Foreign(
                    f"log group {name} exists and is not fmctl cluster {ctx.cluster}'s",
                    hint="delete it (aws logs delete-log-group) or pick another cluster name",
                ) from exc
        logs.put_retention_policy(logGroupName=name, retentionInDays=LOG_DAYS)

    def create(self, req: Request[FunctionParams]) -> FunctionOut:
        self._log_group(req.ctx, req.params)
        client = req.ctx.aws.client("lambda")
        calls = self._calls(req.ctx, req.params) or []

        def make() -> Mapping[str, Any] | None:
            try:
                made = client.create_function(
                    FunctionName=req.params.function_name,
                    Runtime=RUNTIME,
                    Role=str(req.ctx.resolve(req.params.role, "arn")),
                    Handler=HANDLER,
                    Code={"ZipFile": package(calls)},
                    Description=f"fmctl {req.ctx.cluster}: the budget is spent; scale to zero",
                    Timeout=60,
                    MemorySize=128,
                    Tags=req.params.tags.at_creation(),
                )
            except WrongState:
                return None  # the role has not spread through IAM yet
            except Conflict as exc:
                # Made by a run that lost the answer (ours by tag), or someone else's.
                found = self._get(req.ctx, req.params.function_name)
                if found is None or not req.ctx.ours(found.get("Tags") or {}):
                    raise Foreign(
                        f"Lambda function {req.params.function_name} exists and is not fmctl "
                        f"cluster {req.ctx.cluster}'s"
                    ) from exc
                return found["Configuration"]
            return made

        config = req.ctx.wait_until(
            f"IAM to let Lambda assume {req.params.function_name}'s role", make, 2.0, 120.0, req.rid
        )
        arn = str(config["FunctionArn"])
        self._active(req.ctx, req.rid, req.params.function_name)
        self._subscribe(req.ctx, req.params, arn)
        return FunctionOut(req.params.function_name, arn)

    def wait(
        self, req: Request[FunctionParams], observed: Observed[FunctionOut, FunctionLive]
    ) -> FunctionOut:
        self._active(req.ctx, req.rid, req.params.function_name)
        return observed.outputs

    def _active(self, ctx: Context, rid: str, name: str) -> None:
        client = ctx.aws.client("lambda")

        def ready() -> bool | None:
            config = client.get_function_configuration(FunctionName=name)
            state = config.get("State", "Active")
            if state == "Failed":
                raise ResourceError(
                    f"Lambda function {name} failed: {config.get('StateReason')}",
                    hint="`fmctl up` again makes it again; its log group says more",
                )
            done = state == "Active" and config.get("LastUpdateStatus", "Successful") in (
                "Successful",
                "Failed",
            )
            return True if done else None

        ctx.wait_until(f"Lambda function {name} to be active", ready, 3.0, 300.0, rid)

    def _subscribe(self, ctx: Context, params: FunctionParams, arn: str) -> None:
        topic = str(ctx.resolve(params.topic, "arn"))
        with contextlib.suppress(Conflict):  # granted by an earlier run
            ctx.aws.client("lambda").add_permission(
                FunctionName=params.function_name,
                StatementId=PERMISSION,
                Action="lambda:InvokeFunction",
                Principal="sns.amazonaws.com",
                SourceArn=topic,
            )
        ctx.aws.client("sns").subscribe(TopicArn=topic, Protocol="lambda", Endpoint=arn)

    def update(
        self,
        req: Request[FunctionParams],
        observed: Observed[FunctionOut, FunctionLive],
        changes: Sequence[FieldChange],
    ) -> FunctionOut:
        client = req.ctx.aws.client("lambda")
        paths = {c.path for c in changes}
        if "code" in paths:
            client.update_function_code(
                FunctionName=req.params.function_name,
                ZipFile=package(self._calls(req.ctx, req.params) or []),
            )
            self._active(req.ctx, req.rid, req.params.function_name)
        if paths & {"role", "runtime"}:
            client.update_function_configuration(
                FunctionName=req.params.function_name,
                Role=str(req.ctx.resolve(req.params.role, "arn")),
                Runtime=RUNTIME,
            )
            self._active(req.ctx, req.rid, req.params.function_name)
        if "topics" in paths:
            self._unsubscribe(req.ctx, observed.outputs.arn)
            self._subscribe(req.ctx, req.params, observed.outputs.arn)
        for change in changes:
            if change.path == "tags":
                add, remove = tag_updates(change.before, change.after)
                if add:
                    client.tag_resource(Resource=observed.outputs.arn, Tags=add)
                if remove:
                    client.untag_resource(Resource=observed.outputs.arn, TagKeys=remove)
        return observed.outputs

    @staticmethod
    def _unsubscribe(ctx: Context, arn: str) -> None:
        sns = ctx.aws.client("sns")
        for page in sns.get_paginator("list_subscriptions").paginate():
            for item in page.get("Subscriptions", []):
                if item.get("Protocol") == "lambda" and item.get("Endpoint") == arn:
                    with contextlib.suppress(NotFound):
                        sns.unsubscribe(SubscriptionArn=item["SubscriptionArn"])

    def find_owned(self, ctx: Context) -> list[Owned]:
        """The cluster's functions, and the log group of one already gone (a `down` cut
        short between the two deletes), which ``delete`` then finishes."""
        client, out = ctx.aws.client("lambda"), []
        prefix = f"fmctl-{ctx.cluster}-"
        for page in client.get_paginator("list_functions").paginate():
            for function in page.get("Functions", []):
                if not str(function["FunctionName"]).startswith(prefix):
                    continue
                tags = client.list_tags(Resource=function["FunctionArn"]).get("Tags", {})
                if ctx.ours(tags):
                    name = str(function["FunctionName"])
                    out.append(self.owned_item(tags.get(RESOURCE_TAG) or "?", name))
        logs, found = ctx.aws.client("logs"), {o.id for o in out}
        pages = logs.get_paginator("describe_log_groups").paginate(
            logGroupNamePrefix=log_group(prefix)
        )
        for group_page in pages:
            for group in group_page.get("logGroups", []):
                name = str(group["logGroupName"]).rsplit("/", 1)[-1]
                if name in found:
                    continue
                tags = logs.list_tags_log_group(logGroupName=group["logGroupName"]).get("tags", {})
                if ctx.ours(tags):
                    out.append(self.owned_item(tags.get(RESOURCE_TAG) or "?", name))
        return out

    def delete(self, ctx: Context, owned: Owned) -> None:
        """Unsubscribe it, delete it, and delete its log group (what it said goes with
        it)."""
        found = self._get(ctx, owned.id)
        if found is not None:
            self._unsubscribe(ctx, str(found["Configuration"]["FunctionArn"]))
            with contextlib.suppress(NotFound):
                ctx.aws.client("lambda").delete_function(FunctionName=owned.id)
        logs, name = ctx.aws.client("logs"), log_group(owned.id)
        try:
            tags = logs.list_tags_log_group(logGroupName=name).get("tags", {})
            if ctx.ours(tags):
                logs.delete_log_group(logGroupName=name)
        except NotFound:
            pass
