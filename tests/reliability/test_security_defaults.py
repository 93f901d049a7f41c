"""Security defaults on a live cluster (the sandbox's): no world-open ingress, encryption at
rest, a private and TLS-only artifact bucket, no secret written to disk, private state
files. What fmctl renders is checked statically in tests/render/test_security_rendered.py
(least-privilege IAM, no secret, checkov)."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

from tests.engine.harness import Sandbox, owned, raw_leftovers, region_of, spec_file
from tests.render.test_security_rendered import SECRET_PATTERNS


def test_live_defaults_after_up(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "sec-defaults"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    aws = sandbox.aws(region)
    ids = {logical: aws_id for _, logical, aws_id in owned(sandbox, name, region)}

    # No ingress from the world (this cluster has no sshCidr, so not even SSH).
    groups = aws.client("ec2").describe_security_groups(
        GroupIds=[v for k, v in ids.items() if k.startswith("sg/")]
    )["SecurityGroups"]
    for group in groups:
        for rule in group["IpPermissions"]:
            assert all(r["CidrIp"] != "0.0.0.0/0" for r in rule.get("IpRanges", [])), group
            assert all(r["CidrIpv6"] != "::/0" for r in rule.get("Ipv6Ranges", [])), group

    # Encryption at rest, a private bucket that refuses plain HTTP.
    s3 = aws.client("s3")
    rules = s3.get_bucket_encryption(Bucket=ids["bucket"])["ServerSideEncryptionConfiguration"]
    assert rules["Rules"][0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    block = s3.get_public_access_block(Bucket=ids["bucket"])["PublicAccessBlockConfiguration"]
    assert all(block.values()) and len(block) == 4
    policy = json.loads(s3.get_bucket_policy(Bucket=ids["bucket"])["Policy"])
    assert any(
        s["Effect"] == "Deny"
        and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        for s in policy["Statement"]
    )
    fs = aws.client("fsx").describe_file_systems(FileSystemIds=[ids["fsx"]])["FileSystems"][0]
    assert fs["KmsKeyId"]

    # State: private files, no secret in state or logs (nor the sandbox's own secret key).
    patterns = [*SECRET_PATTERNS, re.compile(re.escape(sandbox.credentials[1]))]
    folder = sandbox.home / "clusters" / name
    assert folder.exists()
    for path in [folder, *folder.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not any(p.search(text) for p in patterns), path

    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0 and raw_leftovers(sandbox, name, region) == []
