"""Storage kinds: the artifact bucket and its uploads, FSx for Lustre and its S3 link."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provisioner.drivers.aws import AwsError, error_code
from provisioner.drivers.ec2_base import is_gone, retry_dependency
from provisioner.plan.context import OWNER_TAG, RESOURCE_TAG, Engine
from provisioner.plan.graph import Found, Node, Outputs


def bucket_name(cluster: str, account: str, region: str) -> str:
    """Globally unique and stable, so a re-run finds the same bucket."""
    return f"fmctl-{cluster}-{account}-{region}"[:63].rstrip("-")


def _await_available(
    engine: Engine, what: str, fetch: Callable[[], dict[str, Any]], expected: float, resource: str
) -> dict[str, Any]:
    """Wait for an FSx lifecycle to reach AVAILABLE; FAILED or MISCONFIGURED is an error."""

    def probe() -> dict[str, Any] | None:
        item = fetch()
        if item["Lifecycle"] in ("FAILED", "MISCONFIGURED"):
            reason = item.get("FailureDetails", {}).get("Message", "")
            raise RuntimeError(f"{what} is {item['Lifecycle']}: {reason}".rstrip(": "))
        return item if item["Lifecycle"] == "AVAILABLE" else None

    result: dict[str, Any] = engine.wait_until(
        f"{what} to be AVAILABLE", probe, expected, 3600, resource
    )
    return result


def _delete_and_wait(
    engine: Engine,
    found: Found,
    what: str,
    delete: Callable[[], Any],
    fetch: Callable[[], list[Any]],
    expected: float,
) -> None:
    """Delete, then wait until describing it says it is gone (an error or an empty list)."""
    retry_dependency(delete, found.id, engine)

    def gone() -> bool | None:
        try:
            return None if fetch() else True
        except Exception as exc:
            if is_gone(exc):
                return True
            raise

    engine.wait_until(f"{what} to be deleted", gone, expected, 3600, found.logical_id)


class Bucket:
    """The artifact bucket: versioned, encrypted, public access blocked, TLS only."""

    name, after = "bucket", ()
    create_seconds, delete_seconds = 2.0, 2.0

    def _name(self, engine: Engine) -> str:
        return bucket_name(engine.cluster, engine.aws.account_id(), engine.region)

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        name = self._name(engine)
        return {"id": name} if self._owned(engine, name) else None

    def _owned(self, engine: Engine, name: str) -> bool:
        s3 = engine.aws.client("s3")
        try:
            tags = s3.get_bucket_tagging(Bucket=name)["TagSet"]
        except Exception as exc:
            if error_code(exc) in ("NoSuchBucket", "NoSuchTagSet", "404"):
                return False
            raise
        return {t["Key"]: t["Value"] for t in tags}.get(OWNER_TAG) == engine.cluster

    def create(self, engine: Engine, node: Node) -> Outputs:
        s3 = engine.aws.client("s3")
        name = self._name(engine)
        kwargs: dict[str, Any] = {"Bucket": name}
        if engine.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": engine.region}
        try:
            s3.create_bucket(**kwargs)
        except Exception as exc:
            if error_code(exc) != "BucketAlreadyOwnedByYou":
                raise
        s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": engine.tag_list(node.id)})
        s3.put_public_access_block(
            Bucket=name,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        )
        s3.put_bucket_encryption(
            Bucket=name,
            ServerSideEncryptionConfiguration={
                "Rules": [
                    {
                        "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"},
                        "BucketKeyEnabled": True,
                    }
                ]
            },
        )
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        s3.put_bucket_policy(
            Bucket=name,
            Policy=json.dumps(
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
            ),
        )
        return {"id": name}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        name = self._name(engine)
        return [Found(self.name, "bucket", name)] if self._owned(engine, name) else []

    def delete(self, engine: Engine, found: Found) -> None:
        s3 = engine.aws.client("s3")
        try:
            paginator = s3.get_paginator("list_object_versions")
            for page in paginator.paginate(Bucket=found.id):
                victims = [
                    {"Key": v["Key"], "VersionId": v["VersionId"]}
                    for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
                ]
                if victims:
                    s3.delete_objects(Bucket=found.id, Delete={"Objects": victims})
            s3.delete_bucket(Bucket=found.id)
        except Exception as exc:
            if not is_gone(exc):
                raise


def artifact_bucket(engine: Engine) -> str:
    """The cluster's artifact bucket (by its name and tag), or an error saying to `up`."""
    found = Bucket().find_all(engine)
    if not found:
        raise AwsError(
            f"{engine.cluster} has no artifact bucket in {engine.region}",
            hint="run `fmctl up` first",
        )
    return found[0].id


class Artifacts:
    """The slurm/ scripts and the cluster's rendered monitoring files, uploaded under
    ``<cluster>/slurm/`` (ParallelCluster's custom actions fetch them).

    A manifest object records the content hash, so a re-run uploads only when they changed.
    """

    name, after = "artifacts", ("bucket",)
    create_seconds, delete_seconds = 2.0, 0.0

    def _files(self, node: Node) -> dict[str, bytes]:
        """The shipped scripts, plus the files rendered for this cluster (``extra``: path
        under slurm/ -> text), e.g. the head node's Prometheus config and dashboards."""
        root = Path(node.params["root"])
        files = {
            str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }
        extra: dict[str, str] = node.params.get("extra", {})
        files.update({path: text.encode() for path, text in sorted(extra.items())})
        return files

    def _digest(self, files: dict[str, bytes]) -> str:
        h = hashlib.sha256()
        for path, data in files.items():
            h.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
        return h.hexdigest()

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        s3 = engine.aws.client("s3")
        bucket = engine.output("bucket")
        key = f"{engine.cluster}/slurm/.fmctl-manifest.json"
        try:
            manifest = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        except Exception as exc:
            if error_code(exc) in ("NoSuchKey", "404", "NoSuchBucket"):
                return None
            raise
        if manifest.get("digest") != self._digest(self._files(node)):
            return None
        return {"id": f"s3://{bucket}/{engine.cluster}/slurm"}

    def create(self, engine: Engine, node: Node) -> Outputs:
        s3 = engine.aws.client("s3")
        bucket = engine.output("bucket")
        files = self._files(node)
        for path, data in files.items():
            s3.put_object(Bucket=bucket, Key=f"{engine.cluster}/slurm/{path}", Body=data)
        s3.put_object(
            Bucket=bucket,
            Key=f"{engine.cluster}/slurm/.fmctl-manifest.json",
            Body=json.dumps({"digest": self._digest(files), "files": sorted(files)}),
        )
        return {"id": f"s3://{bucket}/{engine.cluster}/slurm"}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        return []  # objects go with the bucket

    def delete(self, engine: Engine, found: Found) -> None:
        return None


def _fsx_tags(item: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags", [])}


class FileSystem:
    """FSx for Lustre, created in the private subnet with the FSx security group."""

    name = "fsx"
    after: tuple[str, ...] = ("subnet", "sg")
    create_seconds, delete_seconds = 600.0, 300.0

    def _owned(self, engine: Engine) -> list[dict[str, Any]]:
        fsx = engine.aws.client("fsx")
        items: list[dict[str, Any]] = []
        for page in fsx.get_paginator("describe_file_systems").paginate():
            items += [
                f
                for f in page["FileSystems"]
                if _fsx_tags(f).get(OWNER_TAG) == engine.cluster
                and f.get("Lifecycle") not in ("DELETING", "FAILED")
            ]
        return items

    def _outputs(self, item: dict[str, Any]) -> Outputs:
        return {
            "id": item["FileSystemId"],
            "dns": item.get("DNSName", ""),
            "mount_name": item.get("LustreConfiguration", {}).get("MountName", ""),
            "lifecycle": item.get("Lifecycle"),
        }

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        for item in self._owned(engine):
            if _fsx_tags(item).get(RESOURCE_TAG) == node.id:
                return self._outputs(item)
        return None

    def create(self, engine: Engine, node: Node) -> Outputs:
        p = node.params
        lustre: dict[str, Any] = {
            "DeploymentType": p["deployment_type"],
            "DataCompressionType": "LZ4",
        }
        if p.get("throughput_per_tib"):
            lustre["PerUnitStorageThroughput"] = p["throughput_per_tib"]
        if p.get("import_path") and p["deployment_type"] != "PERSISTENT_2":
            lustre["ImportPath"] = p["import_path"]
            if p.get("export_path"):
                lustre["ExportPath"] = p["export_path"]
            lustre["AutoImportPolicy"] = "NEW_CHANGED_DELETED"
        item = engine.aws.client("fsx").create_file_system(
            ClientRequestToken=engine.token(node.id),
            FileSystemType="LUSTRE",
            StorageCapacity=p["capacity_gib"],
            StorageType="SSD",
            SubnetIds=[engine.output(p["subnet"])],
            SecurityGroupIds=[engine.output(p["security_group"])],
            LustreConfiguration=lustre,
            FileSystemTypeVersion="2.15",
            Tags=engine.tag_list(node.id),
        )["FileSystem"]
        return self._outputs(item)

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        fsx = engine.aws.client("fsx")
        item = _await_available(
            engine,
            f"FSx for Lustre {outputs['id']}",
            lambda: fsx.describe_file_systems(FileSystemIds=[outputs["id"]])["FileSystems"][0],
            self.create_seconds,
            node.id,
        )
        return self._outputs(item)

    def find_all(self, engine: Engine) -> list[Found]:
        return [
            Found(self.name, _fsx_tags(i).get(RESOURCE_TAG, "?"), i["FileSystemId"])
            for i in self._owned(engine)
        ]

    def delete(self, engine: Engine, found: Found) -> None:
        fsx = engine.aws.client("fsx")
        _delete_and_wait(
            engine,
            found,
            f"FSx {found.id}",
            lambda: fsx.delete_file_system(
                FileSystemId=found.id, ClientRequestToken=engine.token(f"delete/{found.id}")
            ),
            lambda: fsx.describe_file_systems(FileSystemIds=[found.id])["FileSystems"],
            self.delete_seconds,
        )


class ExistingFileSystem(FileSystem):
    """A file system the spec names: looked up, never changed or deleted."""

    name = "existing-fsx"
    after: tuple[str, ...] = ()

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        try:
            items = engine.aws.client("fsx").describe_file_systems(
                FileSystemIds=[node.params["id"]]
            )["FileSystems"]
        except Exception as exc:
            if is_gone(exc):
                return None
            raise
        return self._outputs(items[0]) if items else None

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        return []


class RepositoryLink:
    """An FSx data-repository association: an S3 prefix with automatic import and export."""

    name, after = "dra", ("fsx",)
    create_seconds, delete_seconds = 420.0, 180.0

    def _all(self, engine: Engine, fs_id: str | None = None) -> list[dict[str, Any]]:
        fsx = engine.aws.client("fsx")
        kwargs: dict[str, Any] = {}
        if fs_id:
            kwargs["Filters"] = [{"Name": "file-system-id", "Values": [fs_id]}]
        items = fsx.describe_data_repository_associations(**kwargs)["Associations"]
        return [
            a
            for a in items
            if _fsx_tags(a).get(OWNER_TAG) == engine.cluster
            and a.get("Lifecycle") not in ("DELETING", "FAILED")
        ]

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        for item in self._all(engine, engine.output(node.params["fsx"])):
            if _fsx_tags(item).get(RESOURCE_TAG) == node.id:
                return {"id": item["AssociationId"]}
        return None

    def create(self, engine: Engine, node: Node) -> Outputs:
        p = node.params
        events = ["NEW", "CHANGED", "DELETED"]
        s3: dict[str, Any] = {}
        if p["auto_import"]:
            s3["AutoImportPolicy"] = {"Events": events}
        if p["auto_export"]:
            s3["AutoExportPolicy"] = {"Events": events}
        item = engine.aws.client("fsx").create_data_repository_association(
            FileSystemId=engine.output(p["fsx"]),
            FileSystemPath=p["file_system_path"],
            DataRepositoryPath=p["s3_path"],
            BatchImportMetaDataOnCreate=p["auto_import"],
            S3=s3,
            ClientRequestToken=engine.token(node.id),
            Tags=engine.tag_list(node.id),
        )["Association"]
        return {"id": item["AssociationId"]}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        fsx = engine.aws.client("fsx")
        _await_available(
            engine,
            f"S3 association {outputs['id']}",
            lambda: fsx.describe_data_repository_associations(AssociationIds=[outputs["id"]])[
                "Associations"
            ][0],
            self.create_seconds,
            node.id,
        )
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        return [
            Found(self.name, _fsx_tags(a).get(RESOURCE_TAG, "?"), a["AssociationId"])
            for a in self._all(engine)
        ]

    def delete(self, engine: Engine, found: Found) -> None:
        fsx = engine.aws.client("fsx")
        _delete_and_wait(
            engine,
            found,
            f"S3 association {found.id}",
            lambda: fsx.delete_data_repository_association(
                AssociationId=found.id, DeleteDataInFileSystem=False
            ),
            lambda: fsx.describe_data_repository_associations(AssociationIds=[found.id])[
                "Associations"
            ],
            self.delete_seconds,
        )
