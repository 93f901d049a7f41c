"""An SNS topic of the cluster's: the one AWS Budgets tells that the budget is spent, which
the stop function listens on.

Amazon SNS (API 2010-03-31, botocore's model and the Developer Guide): a topic's ARN is
``arn:aws:sns:REGION:ACCOUNT:NAME``; CreateTopic of a name that exists with the same
attributes returns it (with other ones: InvalidParameter); GetTopicAttributes of a missing
topic answers NotFound. The ``Policy`` attribute is the topic's whole access policy:
fmctl's lets only ``budgets.amazonaws.com`` publish, for this account's budgets
(``aws:SourceAccount``, as the Billing User Guide's topic policy for budget notifications
does). ``KmsMasterKeyId`` encrypts messages at rest. Tags: Tag/Untag/ListTagsForResource.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from provisioner.drivers.aws_errors import NotFound
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
from provisioner.resources.errors import Foreign
from provisioner.resources.kms import KmsOut
from provisioner.resources.tags import (
    CREATED_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
    apply_tag_change,
)


@dataclass(frozen=True)
class TopicParams:
    """A topic only ``publisher`` (a service principal) may publish to, encrypted with
    ``key``."""

    topic_name: str
    publisher: str
    key: Ref[KmsOut]
    tags: DesiredTags


@dataclass(frozen=True)
class TopicOut:
    """The topic by ARN."""

    id: str
    arn: str


@dataclass(frozen=True)
class TopicLive:
    """What fmctl manages of a topic."""

    policy: str
    key: str
    tags: Tags


def access_policy(arn: str, account: str, publisher: str) -> str:
    """The topic's access policy: ``publisher`` may publish, for ``account`` only."""
    document = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ServicePublishes",
                "Effect": "Allow",
                "Principal": {"Service": publisher},
                "Action": "SNS:Publish",
                "Resource": arn,
                "Condition": {"StringEquals": {"aws:SourceAccount": account}},
            }
        ],
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def _canonical(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return text


class Topic(Kind[TopicParams, TopicOut, TopicLive]):
    """An SNS topic of the cluster's."""

    name, params, outputs = "sns-topic", TopicParams, TopicOut
    create_seconds, update_seconds, delete_seconds = 1.0, 1.0, 1.0
    policy = policies(
        policy=Policy(How.UPDATE, "SetTopicAttributes replaces the access policy"),
        key=Policy(How.UPDATE, "SetTopicAttributes changes the encryption key"),
    )

    def _arn(self, ctx: Context, name: str) -> str:
        account = ctx.cached("sts:account", ctx.aws.account_id)
        return f"arn:aws:sns:{ctx.region}:{account}:{name}"

    def _tags(self, ctx: Context, arn: str) -> Tags:
        listed = ctx.aws.client("sns").list_tags_for_resource(ResourceArn=arn)
        return Tags.of({t["Key"]: t["Value"] for t in listed.get("Tags", [])})

    def _attributes(self, ctx: Context, arn: str) -> dict[str, str] | None:
        try:
            found = ctx.aws.client("sns").get_topic_attributes(TopicArn=arn)
        except NotFound:
            return None
        attributes: dict[str, str] = found["Attributes"]
        return attributes

    def read(self, req: Request[TopicParams]) -> Observed[TopicOut, TopicLive] | None:
        arn = self._arn(req.ctx, req.params.topic_name)
        attributes = self._attributes(req.ctx, arn)
        if attributes is None:
            return None
        tags = self._tags(req.ctx, arn)
        if not req.ctx.ours(tags.as_dict()):
            raise Foreign(
                f"SNS topic {req.params.topic_name} exists and is not fmctl cluster "
                f"{req.ctx.cluster}'s",
                hint="delete it (aws sns delete-topic) or pick another cluster name",
            )
        live = TopicLive(
            _canonical(attributes.get("Policy", "")), attributes.get("KmsMasterKeyId", ""), tags
        )
        return Observed(TopicOut(arn, arn), live, arn)

    def _policy(self, ctx: Context, params: TopicParams) -> str:
        account = ctx.cached("sts:account", ctx.aws.account_id)
        return access_policy(self._arn(ctx, params.topic_name), account, params.publisher)

    def desired(
        self, req: Request[TopicParams], observed: Observed[TopicOut, TopicLive]
    ) -> TopicLive:
        key = req.ctx.resolve(req.params.key, "arn")
        return TopicLive(
            self._policy(req.ctx, req.params),
            UNKNOWN if key is UNKNOWN else str(key),
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, req: Request[TopicParams]) -> TopicOut:
        # CreateTopic is idempotent by name and attributes: a run that lost the answer gets
        # the same topic back; a foreign one of the name is refused by its tags below.
        arn = self._arn(req.ctx, req.params.topic_name)
        if self._attributes(req.ctx, arn) is not None and not req.ctx.ours(
            self._tags(req.ctx, arn).as_dict()
        ):
            raise Foreign(
                f"SNS topic {req.params.topic_name} exists and is not fmctl cluster "
                f"{req.ctx.cluster}'s"
            )
        made = req.ctx.aws.client("sns").create_topic(
            Name=req.params.topic_name,
            Attributes={
                "Policy": self._policy(req.ctx, req.params),
                "KmsMasterKeyId": str(req.ctx.resolve(req.params.key, "arn")),
            },
            Tags=req.ctx.tag_list(req.params.tags),
        )
        arn = str(made["TopicArn"])
        return TopicOut(arn, arn)

    def update(
        self,
        req: Request[TopicParams],
        observed: Observed[TopicOut, TopicLive],
        changes: Sequence[FieldChange],
    ) -> TopicOut:
        sns = req.ctx.aws.client("sns")
        for change in changes:
            if change.path == "policy":
                sns.set_topic_attributes(
                    TopicArn=observed.id,
                    AttributeName="Policy",
                    AttributeValue=self._policy(req.ctx, req.params),
                )
            elif change.path == "key":
                sns.set_topic_attributes(
                    TopicArn=observed.id,
                    AttributeName="KmsMasterKeyId",
                    AttributeValue=str(req.ctx.resolve(req.params.key, "arn")),
                )
            elif change.path == "tags":
                apply_tag_change(
                    change.after,
                    lambda tags: sns.tag_resource(ResourceArn=observed.id, Tags=tags),
                    lambda keys: sns.untag_resource(ResourceArn=observed.id, TagKeys=keys),
                )
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        sns = ctx.aws.client("sns")
        out = []
        prefix = f"fmctl-{ctx.cluster}-"
        for page in sns.get_paginator("list_topics").paginate():
            for topic in page.get("Topics", []):
                arn = str(topic["TopicArn"])
                if not arn.rsplit(":", 1)[-1].startswith(prefix):
                    continue
                tags = self._tags(ctx, arn)
                if ctx.ours(tags.as_dict()):
                    out.append(self.owned_item(tags.get(RESOURCE_TAG) or "?", arn))
        return out

    def delete(self, ctx: Context, owned: Owned) -> None:
        """Delete the topic and its subscriptions (DeleteTopic of a missing topic is not
        an error in SNS)."""
        with contextlib.suppress(NotFound):
            ctx.aws.client("sns").delete_topic(TopicArn=owned.id)
