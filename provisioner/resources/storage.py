"""The artifact bucket and its uploads (the scripts ParallelCluster's custom actions fetch)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner.drivers.aws import AwsError
from provisioner.drivers.aws_errors import AlreadyExists, KeyNotFound, NotFound, Unset
from provisioner.graph.ref import Ref
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
from provisioner.resources.names import BUCKET_NAME_LIMIT, bounded
from provisioner.resources.tags import CREATED_TAG, OWNER_TAG, RESOURCE_TAG, DesiredTags, Tags

if TYPE_CHECKING:
    from types_boto3_s3.literals import ServerSideEncryptionType
    from types_boto3_s3.type_defs import (
        ObjectIdentifierTypeDef,
        PublicAccessBlockConfigurationTypeDef,
        ServerSideEncryptionConfigurationTypeDef,
    )

PUBLIC_ACCESS_BLOCK: PublicAccessBlockConfigurationTypeDef = {
    "BlockPublicAcls": True,
    "IgnorePublicAcls": True,
    "BlockPublicPolicy": True,
    "RestrictPublicBuckets": True,
}


def default_encryption(
    algorithm: ServerSideEncryptionType,
) -> ServerSideEncryptionConfigurationTypeDef:
    """PutBucketEncryption's configuration: ``algorithm`` (AES256 or aws:kms) with S3
    bucket keys."""
    return {
        "Rules": [
            {
                "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": algorithm},
                "BucketKeyEnabled": True,
            }
        ]
    }


def bucket_name(cluster: str, account: str, region: str) -> str:
    """Globally unique and stable, so a re-run finds the same bucket; within S3's limit
    (``names.bounded``: a long cluster name in a long region keeps its region apart)."""
    return bounded(f"fmctl-{cluster}-{account}-{region}", BUCKET_NAME_LIMIT)


def account_of(ctx: Context) -> str:
    """The account of the credentials in use (one STS call per run)."""
    return ctx.cached("sts:account", ctx.aws.account_id)


def tls_only_policy(name: str) -> str:
    """The bucket policy that denies every request not made over TLS."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )


@dataclass(frozen=True)
class BucketOut:
    """The artifact bucket by name."""

    id: str


@dataclass(frozen=True)
class BucketParams:
    """The cluster's artifact bucket (its name follows from cluster, account and region)."""

    tags: DesiredTags


@dataclass(frozen=True)
class BucketLive:
    """What fmctl manages of the bucket: its safety settings and tags."""

    versioning: str
    encryption: str
    public_access_blocked: bool
    tls_only: bool
    tags: Tags


class Bucket(Kind[BucketParams, BucketOut, BucketLive]):
    """The artifact bucket: versioned, encrypted, public access blocked, TLS only."""

    name, params, outputs = "bucket", BucketParams, BucketOut
    policy = policies(
        versioning=Policy(How.UPDATE, "PutBucketVersioning"),
        encryption=Policy(How.UPDATE, "PutBucketEncryption"),
        public_access_blocked=Policy(How.UPDATE, "PutPublicAccessBlock"),
        tls_only=Policy(How.UPDATE, "PutBucketPolicy"),
    )

    def bucket(self, ctx: Context) -> str:
        """The bucket's name."""
        return bucket_name(ctx.cluster, account_of(ctx), ctx.region)

    def _tags(self, ctx: Context, name: str) -> Tags | None:
        """The bucket's tags (None: no such bucket), read once per run."""
        return ctx.cached(f"s3:tags:{name}", lambda: self._read_tags(ctx, name))

    def _read_tags(self, ctx: Context, name: str) -> Tags | None:
        s3 = ctx.aws.client("s3")
        try:
            return Tags.from_list(s3.get_bucket_tagging(Bucket=name)["TagSet"])
        except NotFound:
            return None
        except Unset:
            return Tags()

    def read(self, req: Request[BucketParams]) -> Observed[BucketOut, BucketLive] | None:
        name = self.bucket(req.ctx)
        tags = self._tags(req.ctx, name)
        if tags is None or tags.get(OWNER_TAG) != req.ctx.cluster:
            return None
        s3 = req.ctx.aws.client("s3")
        versioning = str(s3.get_bucket_versioning(Bucket=name).get("Status", "Disabled"))
        live = BucketLive(
            versioning,
            self._encryption(s3, name),
            self._blocked(s3, name),
            self._policy(s3, name) == json.loads(tls_only_policy(name)),
            tags,
        )
        return Observed(BucketOut(name), live, name)

    @staticmethod
    def _encryption(s3: Any, name: str) -> str:
        try:
            rules = s3.get_bucket_encryption(Bucket=name)["ServerSideEncryptionConfiguration"]
        except Unset:
            return "none"
        default = rules["Rules"][0].get("ApplyServerSideEncryptionByDefault", {})
        return str(default.get("SSEAlgorithm", "none"))

    @staticmethod
    def _blocked(s3: Any, name: str) -> bool:
        try:
            config = s3.get_public_access_block(Bucket=name)["PublicAccessBlockConfiguration"]
        except Unset:
            return False
        return all(config.get(k) for k in PUBLIC_ACCESS_BLOCK)

    @staticmethod
    def _policy(s3: Any, name: str) -> Any:
        try:
            return json.loads(s3.get_bucket_policy(Bucket=name)["Policy"])
        except Unset:
            return None

    def desired(
        self, req: Request[BucketParams], observed: Observed[BucketOut, BucketLive]
    ) -> BucketLive:
        tags = req.params.tags.resolve(observed.live.tags.get(CREATED_TAG))
        return BucketLive("Enabled", "aws:kms", True, True, tags)

    def create(self, req: Request[BucketParams]) -> BucketOut:
        s3 = req.ctx.aws.client("s3")
        name = self.bucket(req.ctx)
        kwargs: dict[str, Any] = {"Bucket": name}
        if req.ctx.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": req.ctx.region}
        try:
            s3.create_bucket(**kwargs)
        except AlreadyExists as exc:
            # Ours: made by a run that lost the answer (outside us-east-1, where S3 answers
            # a second CreateBucket of one's own bucket with 200 instead).
            tags = self._read_tags(req.ctx, name)
            owner = tags.get(OWNER_TAG) if tags else None
            if owner not in (None, req.ctx.cluster):
                raise Foreign(
                    f"S3 bucket {name} exists and is fmctl cluster {owner}'s",
                    hint="pick another cluster name, or delete that cluster (fmctl down)",
                ) from exc
        s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": req.ctx.tag_list(req.params.tags)})
        self._secure(s3, name)
        return BucketOut(name)

    def _secure(self, s3: Any, name: str) -> None:
        s3.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=PUBLIC_ACCESS_BLOCK)
        s3.put_bucket_encryption(
            Bucket=name, ServerSideEncryptionConfiguration=default_encryption("aws:kms")
        )
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        s3.put_bucket_policy(Bucket=name, Policy=tls_only_policy(name))

    def update(
        self,
        req: Request[BucketParams],
        observed: Observed[BucketOut, BucketLive],
        changes: Sequence[FieldChange],
    ) -> BucketOut:
        s3 = req.ctx.aws.client("s3")
        if any(c.path != "tags" for c in changes):
            self._secure(s3, observed.id)
        if any(c.path == "tags" for c in changes):
            # PutBucketTagging replaces the whole set: keep the tags others put there.
            wanted = req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)).as_dict()
            merged = {**observed.live.tags.as_dict(), **wanted}
            stale = [k for k in merged if k.startswith("fmctl.dev/") and k not in wanted]
            for key in stale:
                if key != CREATED_TAG:
                    del merged[key]
            s3.put_bucket_tagging(
                Bucket=observed.id,
                Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in sorted(merged.items())]},
            )
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        name = self.bucket(ctx)
        tags = self._tags(ctx, name)
        if tags is None or tags.get(OWNER_TAG) != ctx.cluster:
            return []
        return [self.owned_item(tags.get(RESOURCE_TAG) or "bucket", name)]

    def delete(self, ctx: Context, owned: Owned) -> None:
        s3 = ctx.aws.client("s3")
        try:
            for page in s3.get_paginator("list_object_versions").paginate(Bucket=owned.id):
                victims: list[ObjectIdentifierTypeDef] = [
                    {"Key": v["Key"], "VersionId": v["VersionId"]}
                    for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
                ]
                if victims:
                    s3.delete_objects(Bucket=owned.id, Delete={"Objects": victims})
            s3.delete_bucket(Bucket=owned.id)
        except NotFound:
            pass


def artifact_bucket(ctx: Context) -> str:
    """The cluster's artifact bucket (by its name and tag), or an error saying to `up`."""
    found = Bucket().find_owned(ctx)
    if not found:
        raise AwsError(
            f"{ctx.cluster} has no artifact bucket in {ctx.region}", hint="run `fmctl up` first"
        )
    return found[0].id


@dataclass(frozen=True)
class ArtifactsOut:
    """Where the uploads live (s3://bucket/cluster/slurm)."""

    id: str


@dataclass(frozen=True)
class ArtifactsParams:
    """The shipped slurm/ folder (``root``) and the files rendered for this cluster
    (``extra``: path under slurm/ -> text), uploaded under ``<cluster>/slurm/``."""

    bucket: Ref[BucketOut]
    root: str
    extra: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ArtifactsLive:
    """The content hash of what is uploaded (from its manifest object)."""

    digest: str | None


MANIFEST = ".fmctl-manifest.json"


class Artifacts(Kind[ArtifactsParams, ArtifactsOut, ArtifactsLive]):
    """The slurm/ scripts and the cluster's rendered monitoring files in the artifact bucket.

    A manifest object records the content hash, so a re-run uploads only when they changed.
    """

    name, params, outputs = "artifacts", ArtifactsParams, ArtifactsOut
    delete_seconds = 0.0
    policy = policies(digest=Policy(How.UPDATE, "the changed files are uploaded again"))

    @staticmethod
    def files(params: ArtifactsParams) -> dict[str, bytes]:
        """Path under slurm/ -> content."""
        root = Path(params.root)
        files = {
            str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }
        files.update({path: text.encode() for path, text in sorted(params.extra)})
        return files

    @staticmethod
    def digest(files: dict[str, bytes]) -> str:
        """One hash over names and contents."""
        h = hashlib.sha256()
        for path, data in files.items():
            h.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
        return h.hexdigest()

    def read(self, req: Request[ArtifactsParams]) -> Observed[ArtifactsOut, ArtifactsLive] | None:
        bucket = Bucket().bucket(req.ctx)
        s3 = req.ctx.aws.client("s3")
        try:
            body = s3.get_object(Bucket=bucket, Key=f"{req.ctx.cluster}/slurm/{MANIFEST}")["Body"]
            manifest = json.loads(body.read())
        except NotFound:  # no manifest, or no bucket
            return None
        where = f"s3://{bucket}/{req.ctx.cluster}/slurm"
        return Observed(ArtifactsOut(where), ArtifactsLive(manifest.get("digest")), where)

    def desired(
        self, req: Request[ArtifactsParams], observed: Observed[ArtifactsOut, ArtifactsLive]
    ) -> ArtifactsLive:
        return ArtifactsLive(self.digest(self.files(req.params)))

    def create(self, req: Request[ArtifactsParams]) -> ArtifactsOut:
        s3 = req.ctx.aws.client("s3")
        bucket = req.ctx.get(req.params.bucket).id
        files = self.files(req.params)
        for path, data in files.items():
            s3.put_object(Bucket=bucket, Key=f"{req.ctx.cluster}/slurm/{path}", Body=data)
        s3.put_object(
            Bucket=bucket,
            Key=f"{req.ctx.cluster}/slurm/{MANIFEST}",
            Body=json.dumps({"digest": self.digest(files), "files": sorted(files)}),
        )
        return ArtifactsOut(f"s3://{bucket}/{req.ctx.cluster}/slurm")

    def update(
        self,
        req: Request[ArtifactsParams],
        observed: Observed[ArtifactsOut, ArtifactsLive],
        changes: Sequence[FieldChange],
    ) -> ArtifactsOut:
        """Upload the new set, then remove what the last one had and this one has not: the
        nodes `aws s3 sync` the whole folder, so a script fmctl no longer ships would still
        reach them. Only the files the last manifest lists go (topology.json, which
        `fmctl topology` publishes beside them, is not fmctl's artifacts' to remove)."""
        s3 = req.ctx.aws.client("s3")
        bucket = req.ctx.get(req.params.bucket).id
        folder = f"{req.ctx.cluster}/slurm"
        try:
            body = s3.get_object(Bucket=bucket, Key=f"{folder}/{MANIFEST}")["Body"]
            before = [str(f) for f in json.loads(body.read()).get("files", [])]
        except KeyNotFound:
            before = []
        out = self.create(req)
        gone = sorted(set(before) - set(self.files(req.params)))
        if gone:
            done = s3.delete_objects(
                Bucket=bucket,
                Delete={"Objects": [{"Key": f"{folder}/{path}"} for path in gone], "Quiet": True},
            )
            # DeleteObjects answers 200 and lists the keys it could not delete.
            failed = [f"{e.get('Key')}: {e.get('Code')}" for e in done.get("Errors", [])]
            if failed:
                raise ResourceError(
                    f"files no longer shipped are still in s3://{bucket}/{folder}: "
                    + "; ".join(failed),
                    hint="`fmctl up` again removes them",
                )
        return out

    def delete(self, ctx: Context, owned: Owned) -> None:
        return None  # the objects go with the bucket
