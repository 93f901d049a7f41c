"""The Kubernetes API, as fmctl uses it: one small interface, over HTTPS.

Everything fmctl does in a cluster goes through ``KubeApi``: server-side apply (field manager
``fmctl``), get, list and delete of objects named by apiVersion and kind. The kind's REST
path comes from the server's discovery documents, so CRDs work as built-in kinds do. The
sandbox's in-memory API (``sandbox.kube``) and a real cluster (kind, EKS) are reached by the
same code over HTTPS.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode

from provisioner import FmctlError

MANAGER = "fmctl"
#: Refresh the bearer token this long before EKS stops accepting it.
TOKEN_REFRESH = 600.0


class KubeError(FmctlError):
    """A failed Kubernetes call: the HTTP status, the Status reason and message; the hint
    follows the status (the Kubernetes API conventions' meaning of each)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}", _kube_hint(status))
        self.status, self.reason, self.message = status, reason, message


def _kube_hint(status: int) -> str:
    if status in (401, 403):
        return (
            "the API server refused this identity: check the kubeconfig context `fmctl up` "
            "wrote, and the cluster's access entries for the caller (`aws eks "
            "list-access-entries`)"
        )
    if status == 404:
        return "not there (yet): run the command again once `fmctl status` shows it ready"
    if status == 409:
        return "another writer changed the object meanwhile: run the command again"
    if status == 0:
        return "refused before it was sent (a run that only reads): a bug if you see it"
    return "the API server failed or could not be reached: run the command again"


class KubeApi(Protocol):
    """What fmctl needs of a Kubernetes API server."""

    def apply(self, obj: dict[str, Any], force: bool = False) -> dict[str, Any]:
        """Server-side apply of ``obj`` as the client's field manager (``fmctl``); returns
        the live object."""

    def get(
        self, api_version: str, kind: str, name: str, namespace: str = ""
    ) -> dict[str, Any] | None:
        """The object, or None when there is none."""

    def list(
        self, api_version: str, kind: str, namespace: str = "", selector: str = ""
    ) -> list[dict[str, Any]]:
        """Objects of a kind (in ``namespace``, or everywhere), by equality label selector."""

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> bool:
        """Delete the object; False when it was already gone."""

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        """What the pod's container printed (``container`` may be left out when the pod has
        only one)."""

    def cordon(self, node: str, labels: dict[str, str | None] | None = None) -> None:
        """Mark the node unschedulable (`kubectl cordon`), with ``labels`` set (None:
        removed) in the same change."""

    def label(self, node: str, labels: dict[str, str | None]) -> None:
        """Set (None: remove) labels of a node, its other fields left as they are."""

    def evict(self, namespace: str, pod: str) -> bool:
        """Ask the API to evict the pod (policy/v1 Eviction: its disruption budgets are
        respected); True when it went (or was gone), False when a budget forbids it now."""


class _Bearer:
    """The Authorization header value, from a token made again before it expires."""

    def __init__(self, token: Callable[[], str]) -> None:
        self._token, self._at, self._text = token, 0.0, ""
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            if not self._text or time.monotonic() - self._at > TOKEN_REFRESH:
                self._text, self._at = self._token(), time.monotonic()
            return f"Bearer {self._text}"


@dataclass(frozen=True)
class Endpoint:
    """Where a Kubernetes API server is and how to trust and reach it."""

    host: str
    #: The CA certificate file to verify the server with; None: the system's.
    ca_file: str | None = None
    #: Or the CA certificate itself (PEM: EKS's certificateAuthority.data, decoded), kept in
    #: memory: no file to leave behind when a run is killed.
    ca_data: str | None = None
    verify: bool = True
    #: A client certificate and its key (kind's kubeconfig), if it authenticates so.
    cert_file: str | None = None
    key_file: str | None = None
    #: The Authorization header's value before each call (a bearer token), if any.
    authorization: Callable[[], str] | None = None
    #: The name to check the server's certificate for, when not the host's (kubeconfig's
    #: ``tls-server-name``), and a proxy to reach it through (``proxy-url``).
    tls_server_name: str | None = None
    proxy: str | None = None


class KubeClient:
    """``KubeApi`` over HTTPS with urllib3 (which botocore has loaded already). The
    ``kubernetes`` package is imported only to read a kubeconfig: importing it costs half
    a second of CPU, in every `up`, `down` and `status` that talks to a cluster."""

    def __init__(
        self,
        endpoint: Endpoint,
        manager: str = MANAGER,
        read_only: bool = False,
        fence: Callable[[], None] | None = None,
    ) -> None:
        import urllib3

        self._endpoint = endpoint
        tls: dict[str, Any] = {
            "cert_reqs": "CERT_REQUIRED" if endpoint.verify else "CERT_NONE",
            "ca_certs": endpoint.ca_file,
            "ca_cert_data": endpoint.ca_data,
            "cert_file": endpoint.cert_file,
            "key_file": endpoint.key_file,
            "server_hostname": endpoint.tls_server_name,
            "timeout": urllib3.Timeout(connect=10, read=60),
            "num_pools": 2,
            "maxsize": 8,  # the apply and health checks' threads share it
        }
        self._pool: urllib3.PoolManager = (
            urllib3.ProxyManager(endpoint.proxy, **tls)
            if endpoint.proxy
            else urllib3.PoolManager(**tls)
        )
        self._manager = manager
        #: Refuse anything but GET, before it is sent (what `plan` reads with).
        self._read_only = read_only
        #: Called before anything but a GET is sent; raises to stop it (a lost lease).
        self._fence = fence
        self._paths: dict[tuple[str, str], tuple[str, bool]] = {}

    @classmethod
    def for_eks(
        cls,
        endpoint: str,
        ca_data: str,
        token: Callable[[], str],
        manager: str = MANAGER,
        read_only: bool = False,
        fence: Callable[[], None] | None = None,
    ) -> KubeClient:
        """A client for an EKS endpoint, authenticated by ``token()`` (called again before
        the token expires)."""
        pem = base64.b64decode(ca_data).decode("ascii")
        where = Endpoint(endpoint, ca_data=pem, authorization=_Bearer(token))
        return cls(where, manager, read_only, fence)

    @classmethod
    def from_kubeconfig(cls, path: str, context: str | None = None) -> KubeClient:
        """A client for a kubeconfig context (kind, or any cluster kubectl reaches), as
        the ``kubernetes`` package reads it (client certificates, tokens, exec plugins)."""
        from kubernetes import client, config

        conf: Any = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=conf
        )

        def authorization() -> str:
            # The header the package itself would send (its key is BearerToken in recent
            # versions, authorization before); the hook re-runs an exec plugin when due.
            for setting in conf.auth_settings().values():
                if setting.get("in") == "header" and setting.get("key") == "authorization":
                    return str(setting.get("value") or "")
            return ""

        where = Endpoint(
            conf.host,
            ca_file=conf.ssl_ca_cert,
            verify=bool(conf.verify_ssl),
            cert_file=conf.cert_file,
            key_file=conf.key_file,
            authorization=authorization,
            tls_server_name=getattr(conf, "tls_server_name", None),
            proxy=getattr(conf, "proxy", None),
        )
        return cls(where)

    def close(self) -> None:
        """Release connections."""
        self._pool.clear()

    def _call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        raw: bool = False,
    ) -> Any:
        if self._read_only and method != "GET":
            raise KubeError(0, "ReadOnly", f"{method} {path}: this run only reads")
        if self._fence is not None and method != "GET":
            self._fence()
        url = self._endpoint.host.rstrip("/") + path
        if query:
            url += "?" + urlencode(query)
        headers = {
            "Accept": "text/plain, */*" if raw else "application/json",
            "User-Agent": "fmctl",
        }
        if body is not None:
            headers["Content-Type"] = content_type  # JSON is YAML: apply-patch takes it
        if self._endpoint.authorization is not None:
            value = self._endpoint.authorization()
            if value:
                headers["Authorization"] = value
        response = self._pool.request(
            method,
            url,
            body=None if body is None else json.dumps(body).encode(),
            headers=headers,
            redirect=False,
        )
        if not 200 <= response.status < 300:
            try:
                data = json.loads(response.data or b"{}")
            except ValueError:
                data = {"message": response.data.decode(errors="replace")}
            if not isinstance(data, dict):
                data = {"message": str(data)}
            raise KubeError(
                response.status, str(data.get("reason", "")), str(data.get("message", data))
            )
        if raw:
            return response.data.decode(errors="replace")
        return json.loads(response.data or b"{}")

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(collection path prefix, namespaced) of a kind, from discovery."""
        key = (api_version, kind)
        if key not in self._paths:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for r in self._call("GET", base).get("resources", []):
                if "/" not in r["name"]:
                    self._paths[(api_version, r["kind"])] = (f"{base}", bool(r["namespaced"]))
                    self._paths.setdefault((api_version, f"plural:{r['kind']}"), (r["name"], False))
            if key not in self._paths:
                raise KubeError(404, "NotFound", f"the server has no {kind} in {api_version}")
        return self._paths[key]

    def _path(self, api_version: str, kind: str, namespace: str, name: str = "") -> str:
        base, namespaced = self._resource(api_version, kind)
        plural = self._paths[(api_version, f"plural:{kind}")][0]
        scope = f"/namespaces/{namespace}" if namespaced and namespace else ""
        return f"{base}{scope}/{plural}" + (f"/{name}" if name else "")

    def apply(self, obj: dict[str, Any], force: bool = False) -> dict[str, Any]:
        meta = obj["metadata"]
        path = self._path(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])
        # Strict: a field the server does not know is an error, not silently dropped (what
        # kubectl asks for too).
        query = [("fieldManager", self._manager), ("fieldValidation", "Strict")]
        query += [("force", "true")] if force else []
        result: dict[str, Any] = self._call(
            "PATCH", path, query, obj, "application/apply-patch+yaml"
        )
        return result

    def get(
        self, api_version: str, kind: str, name: str, namespace: str = ""
    ) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self._call(
                "GET", self._path(api_version, kind, namespace, name)
            )
        except KubeError as err:
            if err.status == 404:
                return None
            raise
        return result

    def list(
        self, api_version: str, kind: str, namespace: str = "", selector: str = ""
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", selector)] if selector else []
        items: list[dict[str, Any]] = self._call(
            "GET", self._path(api_version, kind, namespace), query
        ).get("items", [])
        return items

    def cordon(self, node: str, labels: dict[str, str | None] | None = None) -> None:
        body: dict[str, Any] = {"spec": {"unschedulable": True}}
        if labels:
            body["metadata"] = {"labels": labels}
        # A JSON merge patch: the Node's other fields are left as they are (RFC 7386).
        self._call(
            "PATCH",
            f"/api/v1/nodes/{node}",
            [("fieldManager", self._manager)],
            body,
            "application/merge-patch+json",
        )

    def label(self, node: str, labels: dict[str, str | None]) -> None:
        # A JSON merge patch of the labels alone (RFC 7386: null removes one).
        self._call(
            "PATCH",
            f"/api/v1/nodes/{node}",
            [("fieldManager", self._manager)],
            {"metadata": {"labels": labels}},
            "application/merge-patch+json",
        )

    def evict(self, namespace: str, pod: str) -> bool:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        try:
            self._call("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body=body)
        except KubeError as err:
            if err.status == 404:
                return True
            if err.status == 429:  # a disruption budget says not now (the API's answer)
                return False
            raise
        return True

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        query = [("container", container)] if container else None
        text: str = self._call("GET", path, query=query, raw=True)
        return text

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> bool:
        try:
            # Background: dependents go too (a Job's pods), as kubectl deletes; the API's
            # default for batch/v1 Jobs is to orphan them.
            self._call(
                "DELETE",
                self._path(api_version, kind, namespace, name),
                body={"propagationPolicy": "Background"},
            )
        except KubeError as err:
            if err.status == 404:
                return False
            raise
        return True
