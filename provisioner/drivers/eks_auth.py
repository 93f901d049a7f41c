"""How a Kubernetes client proves who it is to EKS, and the kubeconfig that says so.

The token is what ``aws eks get-token`` prints: a presigned STS GetCallerIdentity URL whose
signature covers the header ``x-k8s-aws-id: <cluster>``, base64url without padding, behind
``k8s-aws-v1.``. EKS calls STS with it and maps the caller through its access entries. It
lives about 15 minutes and is never written down: the kubeconfig runs ``fmctl token`` to get
a fresh one (an ``exec`` credential), as ``aws eks update-kubeconfig`` runs the AWS CLI.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from provisioner.drivers.aws import Aws

PREFIX = "k8s-aws-v1."
HEADER = "x-k8s-aws-id"
#: What the presigned URL itself allows; EKS accepts the token about 15 minutes after signing.
URL_SECONDS = 60
TOKEN_SECONDS = 14 * 60


def token(aws: Aws, cluster: str) -> str:
    """A bearer token for ``cluster``'s API server."""
    sts = aws.client("sts")

    def add_header(request: Any, **_: Any) -> None:
        request.headers[HEADER] = cluster

    sts.meta.events.register_first("before-sign.sts.GetCallerIdentity", add_header)
    try:
        url = sts.generate_presigned_url(
            "get_caller_identity", Params={}, ExpiresIn=URL_SECONDS, HttpMethod="GET"
        )
    finally:
        sts.meta.events.unregister("before-sign.sts.GetCallerIdentity", add_header)
    return PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def exec_credential(token_text: str, now: float) -> dict[str, Any]:
    """The ExecCredential a kubeconfig's exec plugin prints."""
    import time

    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + TOKEN_SECONDS))
    return {
        "kind": "ExecCredential",
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "spec": {},
        "status": {"expirationTimestamp": expires, "token": token_text},
    }


def context_name(cluster: str, region: str) -> str:
    """The kubeconfig context (and cluster and user) name for a cluster."""
    return f"fmctl-{cluster}-{region}"


def kubeconfig_entry(
    cluster: str, region: str, endpoint: str, ca_data: str, token_args: Sequence[str] = ()
) -> dict[str, Any]:
    """The cluster, user and context fmctl adds to a kubeconfig (``token_args``: what
    `fmctl token` needs besides cluster and region to reach the same target)."""
    name = context_name(cluster, region)
    args = ["token", "--cluster", cluster, "--region", region, *token_args]
    return {
        "cluster": {
            "name": name,
            "cluster": {"server": endpoint, "certificate-authority-data": ca_data},
        },
        "user": {
            "name": name,
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": _fmctl_command(),
                    "args": args,
                    "interactiveMode": "Never",
                }
            },
        },
        "context": {"name": name, "context": {"cluster": name, "user": name}},
    }


def _fmctl_command() -> str:
    """This fmctl's absolute path when run as `fmctl` (kubectl runs it from anywhere)."""
    import shutil

    me = Path(sys.argv[0])
    if me.name == "fmctl":
        return str(me.resolve())
    return shutil.which("fmctl") or "fmctl"


#: A kubeconfig's sections and the key of each one's entries.
SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


def _read_kubeconfig(path: Path) -> dict[str, Any]:
    from provisioner.drivers import yamlio

    if not path.exists():
        return {}
    config: dict[str, Any] = yamlio.load(path.read_text()) or {}
    return config


def _write_kubeconfig(path: Path, config: dict[str, Any]) -> None:
    """Atomically, mode 0600 (it names how to get credentials for the cluster)."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.fmctl-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(config, fh, sort_keys=False)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def kubeconfig_of(entry: dict[str, Any]) -> dict[str, Any]:
    """A kubeconfig holding ``entry`` alone, its context current (`kubeconfig --print`)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        **{section: [entry[key]] for section, key in SECTIONS},
        "current-context": entry["context"]["name"],
    }


def merge_kubeconfig(path: Path, entry: dict[str, Any], make_current: bool = True) -> None:
    """Add or replace ``entry`` in the kubeconfig at ``path`` (others' entries kept), written
    atomically with mode 0600, as ``aws eks update-kubeconfig`` does."""
    config = _read_kubeconfig(path)
    config.setdefault("apiVersion", "v1")
    config.setdefault("kind", "Config")
    config.setdefault("preferences", {})
    for section, key in SECTIONS:
        items = [i for i in config.get(section) or [] if i.get("name") != entry[key]["name"]]
        config[section] = [*items, entry[key]]
    if make_current or not config.get("current-context"):
        config["current-context"] = entry["context"]["name"]
    _write_kubeconfig(path, config)


def has_kubeconfig_entry(path: Path, cluster: str, region: str) -> bool:
    """True when the kubeconfig at ``path`` holds fmctl's context for ``cluster`` (an
    unreadable file holds none)."""
    import yaml

    try:
        config = _read_kubeconfig(path)
    except (OSError, yaml.YAMLError):
        return False
    wanted = context_name(cluster, region)
    return any(c.get("name") == wanted for c in config.get("contexts") or [])


def remove_kubeconfig_entry(path: Path, cluster: str, region: str) -> bool:
    """Take the cluster, user and context fmctl added for ``cluster`` out of the kubeconfig
    at ``path`` (the user's others untouched; the current context unset when it was this
    one, as ``kubectl config delete-context`` leaves it). True when there was one."""
    config = _read_kubeconfig(path)
    name = context_name(cluster, region)
    found = False
    for section, _ in SECTIONS:
        items = config.get(section) or []
        kept = [i for i in items if i.get("name") != name]
        found = found or len(kept) != len(items)
        if section in config:
            config[section] = kept
    if config.get("current-context") == name:
        config["current-context"] = ""
        found = True
    if found:
        _write_kubeconfig(path, config)
    return found


def default_kubeconfig() -> Path:
    """Where kubectl looks: the first file of $KUBECONFIG, else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return Path(first) if first else Path.home() / ".kube" / "config"
