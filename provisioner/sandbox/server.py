"""The sandbox emulator: moto's server behind a middleware that adds fmctl's shims, a request
log and fault injection, on a free loopback port.

Control endpoints (loopback only, for tests and the demo):
  GET  /_fmctl/health            -> {"ok": true}
  GET  /_fmctl/requests          -> every API call seen: service, action, status, fault
  POST /_fmctl/faults            <- {"rules": [...]} (see ``FaultRule``); replaces the rules
  POST /_fmctl/seed/reservation  <- a capacity reservation (DescribeCapacityReservations shape)
  POST /_fmctl/seed/image        <- an Amazon-owned AMI {region, name, architecture}
  POST /_fmctl/seed/node-tools   <- {"path": DIR or null}: the programs the nodes' pods and
                                    Run Command scripts find first on PATH (kube_jobs, ssm_agent)

Run: ``python -m provisioner.sandbox.server --ready-file F [--port 0] [--scale S]``; it writes
``{"port": N, "pid": P}`` to F once it listens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

from provisioner.sandbox import protocol
from provisioner.sandbox.kube import token_access_key
from provisioner.sandbox.shims import Shims

StartResponse = Callable[..., Any]


@dataclass
class FaultRule:
    """Inject a failure into matching calls.

    ``action``: an operation name or "*" (AWS calls), or "kubernetes" (every call to a sandbox
    cluster's Kubernetes API, which "*" leaves alone; "reset" makes the API unreachable, as a
    private endpoint is from outside its VPC); ``share``: the fraction of matching calls hit
    (seeded, so runs repeat); ``times``: hit at most this many (None: no limit); ``kind``:
    "error" (``status`` + ``code``), "reset" (drop the connection), "reset-after" (carry the
    call out, then drop the connection: the answer is lost) or "slow" (``delay`` s).
    """

    action: str = "*"
    share: float = 1.0
    times: int | None = None
    kind: str = "error"
    status: int = 503
    code: str = "ServiceUnavailable"
    delay: float = 0.0
    hits: int = 0

    def applies(self, action: str, rng: random.Random) -> bool:
        if self.action not in ("*", action):
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        if rng.random() >= self.share:
            return False
        self.hits += 1
        return True


class ConnectionDropped(Exception):
    """Raised to make werkzeug drop the connection (a connection reset for the client)."""


@dataclass
class Middleware:
    """WSGI app: control endpoints, faults, shims, then moto."""

    moto: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
    shims: Shims
    rules: list[FaultRule] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Serialises S3's conditional writes (see ``_conditional_write``).
    conditional: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length:
            body = environ["wsgi.input"].read(length)
        elif environ.get("wsgi.input_terminated"):
            # Chunked uploads (botocore streams S3 bodies this way over HTTPS) carry no
            # Content-Length; the server has de-chunked the stream, so read to its end.
            body = environ["wsgi.input"].read()
            environ.pop("HTTP_TRANSFER_ENCODING", None)
        else:
            body = b""
        if path.startswith("/_fmctl/kube/"):
            return self._kube(environ, body, start)
        if path.startswith("/_fmctl/"):
            return self._control(path, environ.get("REQUEST_METHOD", "GET"), body, start)
        call = protocol.parse(environ, body)
        entry: dict[str, Any] = {
            "service": call.service,
            "action": call.action,
            "access_key": protocol.access_key_of(environ),
            "time": time.time(),
            "fault": None,
        }
        with self.lock:
            self.log.append(entry)
            rule = next((r for r in self.rules if r.applies(call.action, self.rng)), None)
        if rule is not None:
            entry["fault"] = rule.kind
            if rule.kind == "reset":
                _drop_connection(environ, call.action)
            if rule.kind == "reset-after":
                # The call is carried out, then the answer is lost: what makes a retried
                # create without a client token produce a duplicate.
                self._execute(environ, body, call)
                entry["status"] = "executed"
                _drop_connection(environ, call.action)
            if rule.kind == "slow":
                time.sleep(rule.delay)
            else:
                status, headers, payload = protocol.error_for(
                    call, rule.status, rule.code, f"injected by the sandbox: {rule.code}"
                )
                entry["status"] = status
                return _answer(start, status, headers, payload)
        if self.shims.handles(call):
            status, headers, payload = self.shims.handle(call, _base_url(environ))
            entry["status"] = status
            return _answer(start, status, headers, payload)
        environ["wsgi.input"] = BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))

        def recording_start(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            entry["status"] = int(status.split()[0])
            return start(status, headers, exc_info) if exc_info else start(status, headers)

        if _conditional_write(call.service, environ):
            # S3 checks a write's If-Match / If-None-Match and makes it as one step: of
            # concurrent conditional writes to a key one wins, the others get 412 or 409
            # (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html).
            # moto checks, then writes: done one at a time here, as S3 does it.
            with self.conditional:
                return list(self.moto(environ, recording_start))
        return self.moto(environ, recording_start)

    def _execute(self, environ: dict[str, Any], body: bytes, call: protocol.Call) -> None:
        """Carry a call out and throw the answer away."""
        if self.shims.handles(call):
            self.shims.handle(call, _base_url(environ))
            return
        environ["wsgi.input"] = BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        for _ in self.moto(environ, lambda *args: lambda data: None):
            pass

    def _kube(self, environ: dict[str, Any], body: bytes, start: StartResponse) -> Iterable[bytes]:
        """A sandbox EKS cluster's Kubernetes API: /_fmctl/kube/CLUSTER/..."""
        _, _, _, cluster, *rest = environ.get("PATH_INFO", "").split("/")
        headers = {
            k[5:].replace("_", "-").lower(): str(v)
            for k, v in environ.items()
            if k.startswith("HTTP_")
        }
        headers["content-type"] = environ.get("CONTENT_TYPE", "")
        entry: dict[str, Any] = {
            "service": "kubernetes",
            "action": f"{environ.get('REQUEST_METHOD')} /{'/'.join(rest)}",
            # The key the bearer token was signed with: the sandbox's, never a real one.
            "access_key": token_access_key(headers.get("authorization", "")),
            "time": time.time(),
            "fault": None,
            "status": 0,
        }
        with self.lock:
            self.log.append(entry)
            rule = next(
                (
                    r
                    for r in self.rules
                    if r.action == "kubernetes" and r.applies("kubernetes", self.rng)
                ),
                None,
            )
        if rule is not None:
            entry["fault"] = rule.kind
            if rule.kind == "reset":
                _drop_connection(environ, "kubernetes")
            if rule.kind == "slow":
                time.sleep(rule.delay)
            else:
                failure = json.dumps({"kind": "Status", "code": rule.status}).encode()
                headers_out = {"Content-Type": "application/json"}
                return _answer(start, rule.status, headers_out, failure)
        self.shims.tick()
        status, out_headers, payload = self.shims.kube.handle(
            cluster,
            environ.get("REQUEST_METHOD", "GET"),
            "/" + "/".join(rest),
            environ.get("QUERY_STRING", ""),
            headers,
            body,
        )
        return _answer(start, status, out_headers, payload)

    def _control(
        self, path: str, method: str, body: bytes, start: StartResponse
    ) -> Iterable[bytes]:
        if path == "/_fmctl/health":
            data: Any = {"ok": True}
        elif path == "/_fmctl/requests":
            with self.lock:
                data = list(self.log)
        elif path == "/_fmctl/faults" and method == "POST":
            rules = json.loads(body or b"{}").get("rules", [])
            with self.lock:
                self.rules = [FaultRule(**r) for r in rules]
            data = {"rules": len(rules)}
        elif path == "/_fmctl/seed/reservation" and method == "POST":
            self.shims.seed_reservation(json.loads(body))
            data = {"ok": True}
        elif path == "/_fmctl/seed/node-tools" and method == "POST":
            # The folder of tools (nvidia-smi, dcgmi, ...) the sandbox's nodes' pods run.
            self.shims.kube.node_tools = json.loads(body).get("path")
            data = {"ok": True}
        elif path == "/_fmctl/seed/image" and method == "POST":
            data = {"imageId": self.shims.seed_image(json.loads(body))}
        else:
            return _answer(start, 404, {"Content-Type": "application/json"}, b'{"error":"no"}')
        return _answer(start, 200, {"Content-Type": "application/json"}, json.dumps(data).encode())


def _conditional_write(service: str, environ: dict[str, Any]) -> bool:
    """An S3 PUT or DELETE carrying If-Match or If-None-Match."""
    return (
        service == "s3"
        and environ.get("REQUEST_METHOD") in ("PUT", "DELETE", "POST")
        and bool(environ.get("HTTP_IF_MATCH") or environ.get("HTTP_IF_NONE_MATCH"))
    )


def _base_url(environ: dict[str, Any]) -> str:
    """The emulator's own https://host:port, as the client reached it."""
    return f"https://{environ.get('HTTP_HOST', '127.0.0.1')}"


def _drop_connection(environ: dict[str, Any], action: str) -> None:
    """Close the socket under the request: the client sees a connection reset."""
    sock = environ.get("werkzeug.socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    raise ConnectionDropped(action)


def _answer(
    start: StartResponse, status: int, headers: dict[str, str], payload: bytes
) -> Iterable[bytes]:
    reason = {
        200: "OK",
        400: "Bad Request",
        401: "Unauthorized",
        404: "Not Found",
        409: "Conflict",
        500: "Internal Server Error",
        503: "Service Unavailable",
    }.get(status, "Error")
    start(f"{status} {reason}", [*headers.items(), ("Content-Length", str(len(payload)))])
    return [payload]


def _mend_moto() -> None:
    """Where moto answers unlike AWS in a way fmctl depends on, the sandbox mends it.

    moto 5.2 copies a launch template's tags once, at creation, and describes that copy:
    tags set later with CreateTags (EC2 tags launch templates like any resource) match tag
    filters but never show in DescribeLaunchTemplates. The template's tags are read live."""
    from moto.ec2.models.launch_templates import LaunchTemplate

    if not isinstance(getattr(LaunchTemplate, "tags", None), property):
        LaunchTemplate.tags = property(  # type: ignore[assignment]
            lambda self: self.get_tags(), lambda self, value: None
        )


def build_app(scale: float, ca_pem: bytes = b"") -> Middleware:
    """moto's application behind fmctl's middleware (``ca_pem``: the certificate EKS
    clusters present as their certificate authority)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    _mend_moto()
    return Middleware(
        DomainDispatcherApplication(create_backend_app), Shims(scale=scale, ca_pem=ca_pem)
    )


def serve(port: int, scale: float, ready_file: str | None) -> None:
    """Serve HTTPS until killed; announce port and certificate in ``ready_file``."""
    import ssl
    from pathlib import Path

    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    from provisioner.sandbox.tls import make_certificate

    # The emulator itself must never look for real credentials or instance metadata either.
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    os.environ.setdefault("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
    folder = Path(ready_file).parent if ready_file else Path.cwd()
    cert, key = make_certificate(folder)

    class LazyHandshake(ssl.SSLContext):
        """TLS handshakes in each connection's own thread, on its first read: werkzeug's
        listening socket would otherwise shake hands inside accept(), in the one serving
        thread, and a single client that stalls mid-handshake (a process stopped with
        SIGSTOP) would freeze the emulator for every other caller."""

        def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
            kwargs["do_handshake_on_connect"] = False
            return super().wrap_socket(*args, **kwargs)

    context = LazyHandshake(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    class KeepAliveHandler(MotoRequestHandler):
        """HTTP/1.1, so clients keep their TLS connections (botocore and the Kubernetes
        client pool them, as with AWS): a new handshake per call tripled call times."""

        protocol_version = "HTTP/1.1"

    server = make_server(
        "127.0.0.1",
        port,
        build_app(scale, cert.read_bytes()),
        threaded=True,
        request_handler=KeepAliveHandler,
        ssl_context=context,
    )
    if ready_file:
        tmp = f"{ready_file}.tmp"
        with open(tmp, "w") as fh:
            json.dump(
                {"port": server.server_port, "pid": os.getpid(), "scale": scale, "ca": str(cert)},
                fh,
            )
        os.replace(tmp, ready_file)
    server.serve_forever()


def main() -> None:
    """Command-line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--scale", type=float, default=0.0)
    parser.add_argument("--ready-file")
    args = parser.parse_args()
    serve(args.port, args.scale, args.ready_file)


if __name__ == "__main__":
    main()
