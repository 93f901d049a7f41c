"""The launch template's create after a lost answer and its delete, against recorded EC2
answers: CreateLaunchTemplate carries a client token that is the same on every try, so AWS
answers a retried create with the template it made; a name taken by this cluster's template
(tagged) is adopted, by anyone else's refused; a template already gone is deleted."""

from __future__ import annotations

import pytest

from provisioner.resources.base import Owned, Request
from provisioner.resources.errors import Foreign
from provisioner.resources.launch_template import LaunchTemplate, LtOut, request_data
from tests.resources.contract import covers
from tests.resources.recorded import RecordedAws, example, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx, _spec
from tests.resources.test_read_diff import _lt_params

RID = "launch-template/gpu"


@covers("launch-template", "create-adopts")
def test_a_launch_templates_create_carries_one_token_so_a_retry_returns_the_same_one() -> None:
    made = example("ec2", "CreateLaunchTemplate")["LaunchTemplate"]
    tokens = []
    for _run in range(2):
        aws = RecordedAws()
        ctx = _ctx(aws)
        params = _lt_params("p5.48xlarge")
        request = {
            "LaunchTemplateName": "my-template",
            "LaunchTemplateData": request_data(ctx, params.data),
            "TagSpecifications": _spec("launch-template", RID),
            "ClientToken": ctx.token(RID),
        }
        tokens.append(request["ClientToken"])
        aws.answer("ec2", "CreateLaunchTemplate", {"LaunchTemplate": made}, request)
        out = LaunchTemplate().create(Request(ctx, RID, params))
        assert out == LtOut(made["LaunchTemplateId"], int(made["DefaultVersionNumber"]))
        aws.done()
    assert tokens[0] == tokens[1] and tokens[0] != _ctx(RecordedAws()).token(f"{RID}-b")


def _name_taken(aws: RecordedAws, cluster: str) -> None:
    aws.fail("ec2", "CreateLaunchTemplate", "InvalidLaunchTemplateName.AlreadyExistsException")
    templates = example("ec2", "DescribeLaunchTemplates")
    templates["LaunchTemplates"][0]["Tags"] = tags(cluster, RID, team="ml")
    aws.answer("ec2", "DescribeLaunchTemplates", templates)


@covers("launch-template", "create-adopts")
def test_a_launch_template_name_taken_by_this_clusters_is_adopted_and_anyone_elses_refused() -> (
    None
):
    aws = RecordedAws()
    _name_taken(aws, CLUSTER)
    versions = example("ec2", "DescribeLaunchTemplateVersions")
    versions["LaunchTemplateVersions"] = versions["LaunchTemplateVersions"][1:]
    aws.answer("ec2", "DescribeLaunchTemplateVersions", versions)
    out = LaunchTemplate().create(Request(_ctx(aws), RID, _lt_params("p5.48xlarge")))
    assert out.id == "lt-01238c059e3466abc"
    aws.done()
    theirs = RecordedAws()
    _name_taken(theirs, "other")
    with pytest.raises(Foreign, match="exists and is not fmctl's"):
        LaunchTemplate().create(Request(_ctx(theirs), RID, _lt_params("p5.48xlarge")))
    theirs.done()


@covers("launch-template", "delete")
def test_a_launch_template_is_deleted_and_one_already_gone_is_deleted() -> None:
    owned = Owned("launch-template", RID, "lt-01238c059e3466abc")
    aws = RecordedAws()
    deleted = example("ec2", "DeleteLaunchTemplate")
    aws.answer("ec2", "DeleteLaunchTemplate", deleted, {"LaunchTemplateId": owned.id})
    LaunchTemplate().delete(_ctx(aws), owned)
    aws.fail("ec2", "DeleteLaunchTemplate", "InvalidLaunchTemplateId.NotFound")
    LaunchTemplate().delete(_ctx(aws), owned)
    aws.fail("ec2", "DeleteLaunchTemplate", "UnauthorizedOperation", 403)
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        LaunchTemplate().delete(_ctx(aws), owned)
    aws.done()
