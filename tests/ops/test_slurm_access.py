"""How `up` and `status` tell a user to log in to the Slurm head node: SSH as the image's
own user where a key pair and sshCidr let one in (the ParallelCluster cookbook's
cluster_user per platform), else SSM Session Manager."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from provisioner.ops.status import slurm_access
from tests.conftest import ROOT, validate_data


def _spec(os: str, key: str | None, cidr: str | None) -> Any:
    data = yaml.safe_load((ROOT / "examples" / "p5-slurm-capacity-block.yaml").read_text())
    data.setdefault("slurm", {})["os"] = os
    if key:
        data["compute"]["headNode"]["keyName"] = key
    if cidr:
        data["network"]["sshCidr"] = cidr
    else:
        data["network"].pop("sshCidr", None)
    spec = validate_data(data, "slurm").resolved
    assert spec is not None
    return spec


@pytest.mark.parametrize(
    ("os", "user"),
    [
        ("alinux2023", "ec2-user"),
        ("ubuntu2404", "ubuntu"),
        ("rhel9", "ec2-user"),
        ("rocky9", "rocky"),
    ],
)
def test_ssh_as_the_images_user(os: str, user: str) -> None:
    (login,) = slurm_access(
        "c1", "us-east-1", "i-0abc", "203.0.113.7", _spec(os, "ops", "198.51.100.0/24"), False
    )
    assert login.startswith(f"log in: ssh -i ~/.ssh/ops.pem {user}@203.0.113.7")


@pytest.mark.parametrize(("key", "cidr"), [(None, "198.51.100.0/24"), ("ops", None)])
def test_ssm_without_a_way_in_over_ssh(key: str | None, cidr: str | None) -> None:
    (login,) = slurm_access(
        "c1", "us-east-1", "i-0abc", "10.0.0.5", _spec("alinux2023", key, cidr), False
    )
    assert login.startswith("log in: aws ssm start-session --target i-0abc --region us-east-1")
