"""The node scripts uploaded to the artifact bucket (the ``artifacts`` kind) against recorded
S3 answers: read by its manifest (none: not uploaded yet), a change of any file is a new
upload, an upload whose answer was lost is simply made again (objects of the same bytes under
the same keys), an update removes what fmctl no longer ships and only that, and the objects
go with the bucket."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from botocore.response import StreamingBody

from provisioner.graph.ref import Ref
from provisioner.resources.base import How, Owned, Request
from provisioner.resources.context import Context
from provisioner.resources.errors import ResourceError
from provisioner.resources.storage import (
    MANIFEST,
    Artifacts,
    ArtifactsOut,
    ArtifactsParams,
    BucketOut,
    bucket_name,
)
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, lose_answer
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx

BUCKET = bucket_name(CLUSTER, ACCOUNT, "us-east-1")
FOLDER = f"{CLUSTER}/slurm"


def _shipped(tmp_path: Path, **files: str) -> tuple[Context, ArtifactsParams, RecordedAws]:
    root = tmp_path / "slurm"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    aws = RecordedAws()
    ctx = _ctx(aws)
    ctx.record("bucket", BucketOut(BUCKET))
    params = ArtifactsParams(Ref("bucket", BucketOut), str(root), (("health.env", "X=1\n"),))
    return ctx, params, aws


def _body(data: dict[str, object]) -> StreamingBody:
    raw = json.dumps(data).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


@covers("artifacts", "read", "diff")
def test_the_uploaded_scripts_are_read_by_their_manifest_and_any_change_is_an_upload(
    tmp_path: Path,
) -> None:
    ctx, params, aws = _shipped(tmp_path, **{"lib/verify-node.sh": "#!/bin/sh\n"})
    digest = Artifacts.digest(Artifacts.files(params))
    key = f"{FOLDER}/{MANIFEST}"
    aws.answer(
        "s3", "GetObject", {"Body": _body({"digest": digest})}, {"Bucket": BUCKET, "Key": key}
    )
    req = Request(ctx, "artifacts", params)
    observed = Artifacts().read(req)
    assert observed is not None and observed.outputs == ArtifactsOut(f"s3://{BUCKET}/{FOLDER}")
    assert Artifacts().diff(req, observed) == []
    (tmp_path / "slurm" / "lib" / "verify-node.sh").write_text("#!/bin/sh\nexit 0\n")
    (change,) = Artifacts().diff(req, observed)
    assert (change.path, change.how) == ("digest", How.UPDATE)
    aws.fail("s3", "GetObject", "NoSuchKey", 404)
    assert Artifacts().read(req) is None
    aws.done()


@covers("artifacts", "create-adopts")
def test_an_upload_whose_answer_was_lost_is_made_again_the_same(tmp_path: Path) -> None:
    ctx, params, aws = _shipped(tmp_path, **{"lib/verify-node.sh": "#!/bin/sh\n"})
    # The first object's answer is lost (S3 stored it): the run stops there.
    key = f"{FOLDER}/lib/verify-node.sh"
    lose_answer(aws, "s3", "PutObject", {}, {"Bucket": BUCKET, "Key": key, "Body": b"#!/bin/sh\n"})
    with pytest.raises(Exception, match="Connection was closed"):
        Artifacts().create(Request(ctx, "artifacts", params))
    # Again: the same keys, the same bytes; what is in the bucket is one set, as before.
    for _ in range(3):
        aws.answer("s3", "PutObject", {})
    assert Artifacts().create(Request(ctx, "artifacts", params)) == ArtifactsOut(
        f"s3://{BUCKET}/{FOLDER}"
    )
    aws.done()


def test_an_update_removes_the_files_no_longer_shipped_and_nothing_else(tmp_path: Path) -> None:
    ctx, params, aws = _shipped(tmp_path, **{"lib/verify-node.sh": "#!/bin/sh\n"})
    old = {"digest": "0" * 64, "files": ["health.env", "lib/old-hook.sh", "lib/verify-node.sh"]}
    aws.answer("s3", "GetObject", {"Body": _body(old)})
    for _ in range(3):  # the two files and the manifest
        aws.answer("s3", "PutObject", {})
    # topology.json (`fmctl topology` publishes it beside them) is not in any manifest.
    gone = {"Objects": [{"Key": f"{FOLDER}/lib/old-hook.sh"}], "Quiet": True}
    aws.answer("s3", "DeleteObjects", {}, {"Bucket": BUCKET, "Delete": gone})
    Artifacts().update(Request(ctx, "artifacts", params), _observed(), [])
    aws.done()
    aws.answer("s3", "GetObject", {"Body": _body(old)})
    for _ in range(3):
        aws.answer("s3", "PutObject", {})
    aws.answer(
        "s3",
        "DeleteObjects",
        {"Errors": [{"Key": f"{FOLDER}/lib/old-hook.sh", "Code": "AccessDenied"}]},
    )
    with pytest.raises(ResourceError, match=r"old-hook\.sh: AccessDenied"):
        Artifacts().update(Request(ctx, "artifacts", params), _observed(), [])


def _observed():  # type: ignore[no-untyped-def]
    from provisioner.resources.base import Observed
    from provisioner.resources.storage import ArtifactsLive

    where = f"s3://{BUCKET}/{FOLDER}"
    return Observed(ArtifactsOut(where), ArtifactsLive("0" * 64), where)


@covers("artifacts", "delete")
def test_the_uploads_go_with_the_bucket_so_their_delete_calls_nothing() -> None:
    aws = RecordedAws()  # any call would find no answer queued, and fail
    Artifacts().delete(_ctx(aws), Owned("artifacts", "artifacts", f"s3://{BUCKET}/{FOLDER}"))
    aws.done()
