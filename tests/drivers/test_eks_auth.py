"""The EKS token and the kubeconfig: the format EKS's authenticator accepts, and a kubeconfig
merged like `aws eks update-kubeconfig` merges it, with no secret in it and mode 0600."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import yaml

from provisioner.drivers.aws import Aws
from provisioner.drivers.eks_auth import (
    PREFIX,
    exec_credential,
    kubeconfig_entry,
    kubeconfig_of,
    merge_kubeconfig,
    remove_kubeconfig_entry,
    token,
)

# Presigning is local (no call is made); the endpoint is a loopback address all the same.
AWS = Aws("us-west-2", "https://127.0.0.1:9", sandbox=True, credentials=("AKIDEXAMPLE", "s3cr3t"))


def _url(text: str) -> str:
    body = text.removeprefix(PREFIX)
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def test_token_is_a_presigned_get_caller_identity_signing_the_cluster_header() -> None:
    text = token(AWS, "train-1")
    assert text.startswith("k8s-aws-v1.") and "=" not in text
    url = urlparse(_url(text))
    query = parse_qs(url.query)
    assert query["Action"] == ["GetCallerIdentity"]
    assert query["X-Amz-Expires"] == ["60"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert query["X-Amz-Credential"][0].split("/")[2:4] == ["us-west-2", "sts"]
    # The header is signed, not carried: a token for one cluster is no token for another.
    assert token(AWS, "train-2") != text


def test_the_header_hook_does_not_leak_into_other_sts_calls() -> None:
    token(AWS, "train-1")
    sts = AWS.client("sts")
    url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60)
    signed = parse_qs(urlparse(url).query)["X-Amz-SignedHeaders"][0]
    assert "x-k8s-aws-id" not in signed


def test_exec_credential_shape() -> None:
    cred = exec_credential("k8s-aws-v1.abc", 0.0)
    assert cred["kind"] == "ExecCredential"
    assert cred["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    assert cred["status"] == {
        "token": "k8s-aws-v1.abc",
        "expirationTimestamp": "1970-01-01T00:14:00Z",
    }


def test_kubeconfig_merge_keeps_others_and_replaces_its_own(tmp_path: Path) -> None:
    path = tmp_path / ".kube" / "config"
    path.parent.mkdir()
    other = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kind-dev", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "kind-dev", "user": {"token": "theirs"}}],
        "contexts": [{"name": "kind-dev", "context": {"cluster": "kind-dev", "user": "kind-dev"}}],
        "current-context": "kind-dev",
    }
    path.write_text(yaml.safe_dump(other))
    path.chmod(0o644)
    for endpoint in ("https://old.example", "https://new.example"):
        merge_kubeconfig(path, kubeconfig_entry("train", "us-west-2", endpoint, "Q0E="))
    config = yaml.safe_load(path.read_text())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [c["name"] for c in config["clusters"]] == ["kind-dev", "fmctl-train-us-west-2"]
    assert config["clusters"][1]["cluster"] == {
        "server": "https://new.example",
        "certificate-authority-data": "Q0E=",
    }
    assert config["users"][0] == other["users"][0]
    assert config["current-context"] == "fmctl-train-us-west-2"
    exec_ = config["users"][1]["user"]["exec"]
    assert exec_["args"] == ["token", "--cluster", "train", "--region", "us-west-2"]
    assert Path(exec_["command"]).name == "fmctl"
    # No credential of fmctl's is in the file: only how to get one.
    assert "token" not in config["users"][1]["user"]
    assert PREFIX not in path.read_text()


def test_removing_the_entry_leaves_the_users_own(tmp_path: Path) -> None:
    path = tmp_path / "config"
    theirs = kubeconfig_of(kubeconfig_entry("dev", "eu-west-1", "https://dev.example", ""))
    path.write_text(yaml.safe_dump(theirs))
    merge_kubeconfig(path, kubeconfig_entry("train", "us-west-2", "https://new.example", "Q0E="))
    assert remove_kubeconfig_entry(path, "train", "us-west-2") is True
    config = yaml.safe_load(path.read_text())
    for section in ("clusters", "users", "contexts"):
        assert config[section] == theirs[section]
    # It was the current context: unset, not pointed at the user's other cluster.
    assert config["current-context"] == ""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # Gone already, or never written: nothing to do, nothing written.
    assert remove_kubeconfig_entry(path, "train", "us-west-2") is False
    assert remove_kubeconfig_entry(tmp_path / "absent", "train", "us-west-2") is False
    assert not (tmp_path / "absent").exists()


def test_sandbox_entry_names_the_emulator_state(tmp_path: Path) -> None:
    entry = kubeconfig_entry(
        "c", "us-east-1", "https://127.0.0.1:1", "", ("--sandbox", "--state-dir", str(tmp_path))
    )
    args = entry["user"]["user"]["exec"]["args"]
    assert args[-3:] == ["--sandbox", "--state-dir", str(tmp_path)]
    json.dumps(entry)  # plain data
