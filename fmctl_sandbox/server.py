"""The sandbox emulator: moto's server behind fmctl's shims, on a free loopback port, open
only to requests signed with the sandbox's own credentials (``sigv4``).

Besides AWS's services it answers the sandbox's own, signed like the rest (service name
``fmctl-sandbox``, JSON 1.1 with ``X-Amz-Target: FmctlSandbox.OPERATION``), for what a spec
needs that no AWS API can make in an account: ``SeedCapacityReservation`` (a reservation or
Capacity Block with the id the spec names), ``SeedImage`` (an Amazon-owned AMI),
``InjectNodeFault`` (a fault on an EKS node, which its node monitoring agent stand-in reports
and node auto repair acts on: ``eks_repair``; or on a PCS instance, which PCS's health
monitoring acts on: ``pcs_repair``; `fmctl sandbox fault`), ``AdvanceClock`` (EventBridge
Scheduler's clock: ``scheduler_run``), ``SetBudgetSpend`` (a budget's actual spend, whose
notifications then go out: ``budgets``; `fmctl sandbox spend`), and ``Health``. Test
doubles (fault injection into calls, a request log) are not here: tests wrap this
application with their own (``serve``'s ``wrap``).

Run: ``python -m fmctl_sandbox.server --ready-file F --credentials C [--port 0]
[--scale S]``; it writes ``{"port", "pid", "scale", "ca"}`` to F once it listens. C holds
the key pair it accepts (``sigv4.Credentials``), never the command line: other users can
read that.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from fmctl_sandbox import (
    block_events,
    budgets,
    lambda_run,
    pod_identity,
    protocol,
    scheduler_run,
    sigv4,
)
from fmctl_sandbox.eks_model import EksError
from fmctl_sandbox.pcs_model import PcsError
from fmctl_sandbox.shims import Shims

StartResponse = Callable[..., Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
#: The path under which each EKS cluster's Kubernetes API is served (``/k8s/ENDPOINT-ID``).
KUBE_PREFIX = "/k8s/"


#: What the emulator writes to its log before the traceback of a failure of its own (tests
#: look for it: a request the sandbox could not handle is a bug in the sandbox).
INTERNAL_ERROR = "fmctl sandbox: internal error"


class ClientGone(ConnectionError):
    """The client went away mid-request (a killed process's half-sent upload): werkzeug
    drops a connection on a ``ConnectionError`` without answering or logging a failure."""


#: Set in a request's environ once its body has been read off the connection whole.
BODY_READ = "fmctl.body_read"


def read_body(environ: dict[str, Any]) -> bytes:
    """The request's body, read once; the environ is left for the next reader."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    try:
        if length:
            body: bytes = environ["wsgi.input"].read(length)
            if len(body) < length:
                # The sender died mid-upload (a killed `up`): S3 answers IncompleteBody and
                # stores nothing, so neither may the sandbox (moto would keep the part).
                raise ClientGone(f"{len(body)} of {length} bytes before the client went away")
        elif environ.get("wsgi.input_terminated"):
            # Chunked uploads (botocore streams S3 bodies this way over HTTPS) carry no
            # Content-Length; the server has de-chunked the stream, so read to its end.
            body = environ["wsgi.input"].read()
            environ.pop("HTTP_TRANSFER_ENCODING", None)
            environ.pop("wsgi.input_terminated", None)
        else:
            body = b""
    except OSError as e:  # werkzeug: "Invalid chunk header" when the stream just stops
        raise ClientGone(str(e)) from e
    environ["wsgi.input"] = BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    environ[BODY_READ] = True
    return body


@dataclass
class Emulator:
    """WSGI app: the signature check, then the sandbox's service, the shims, then moto.

    Every AWS call is carried out under the shims' lock, one at a time. moto's backends are
    plain dicts and lists that its handlers iterate and change without a lock, and the shims
    change the same backends (EKS launches instances and network interfaces): concurrent
    callers (several `fmctl up` at once) otherwise see "dictionary changed size during
    iteration" and the like, as 500s no retry cures. AWS answers each call as one step;
    so does this. It also makes S3's conditional writes one step, as S3 does them: of
    concurrent writes to a key with If-Match / If-None-Match one wins, the others get 412 or
    409 (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html);
    moto alone checks, then writes.
    """

    moto: App
    shims: Shims
    credentials: sigv4.Credentials
    #: The certificate's file (what the sandbox's own calls to itself verify it with).
    ca_path: str = ""

    def __call__(self, environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        body = read_body(environ)
        path = environ.get("PATH_INFO", "")
        if path.startswith(KUBE_PREFIX):
            return self._kube(environ, body, start)
        if path.startswith(pod_identity.PREFIX):
            return answer(start, *pod_identity.credentials(self.shims, environ))
        call = protocol.parse(environ, body)
        # A program the sandbox runs in a cluster signs with its pod's session (EKS Pod
        # Identity): checked with that pair, then judged as the session's role.
        session = pod_identity.session_of(self.shims, environ)
        signer = pod_identity.keys(session) if session is not None else self.credentials
        refused = sigv4.check_request(environ, body, signer, time.time())
        if refused is None and session is not None:
            call, refused = pod_identity.judge(self.shims, session, call, environ)
        if refused is not None:
            return answer(
                start, *protocol.error_for(call, refused.status, refused.code, refused.message)
            )
        try:
            if call.service == protocol.SANDBOX_SERVICE:
                return answer(start, *self._own(call, _base_url(environ)))
            if self.shims.handles(call):
                return answer(start, *self.shims.handle(call, _base_url(environ)))
            with self.shims.lock:
                # moto's Flask apps run in debug mode: their failures propagate to here.
                return list(self.moto(environ, start))
        except Exception:  # noqa: BLE001 - answered as AWS's 500, which clients retry (below)
            # AWS answers a failure of its own with a 500 in the service's protocol, which
            # clients retry; werkzeug's HTML page would only fail to parse.
            print(f"{INTERNAL_ERROR} on {call.service} {call.action}", file=sys.stderr)
            traceback.print_exc()
            sys.stderr.flush()
            return answer(
                start,
                *protocol.error_for(
                    call,
                    500,
                    "InternalError",
                    "the sandbox failed to handle this request (its server.log has the cause)",
                ),
            )

    def _own(self, call: protocol.Call, base_url: str) -> tuple[int, dict[str, str], bytes]:
        """The sandbox's own operations (see the module's docstring)."""
        if call.action == "Health":
            # Its scale too: a home that reaches this sandbox through AWS_ENDPOINT_URL paces
            # its waits by it (provisioner.drivers.endpoint_pace).
            return protocol.json_response(
                {"ok": True, "account": call.account, "scale": self.shims.scale}
            )
        if call.action == "SeedCapacityReservation":
            self.shims.seed_reservation(call.account, call.region, call.params)
            return protocol.json_response({})
        if call.action == "InjectNodeFault":
            try:
                said = self.shims.inject_fault(call.account, call.region, call.params)
            except (EksError, PcsError) as err:
                return protocol.json_error(err.status, err.code, err.message)
            return protocol.json_response({"said": said})
        if call.action == "AdvanceClock":
            # EventBridge Scheduler's clock moved on: the schedules now due run (as the
            # sandbox itself: scheduler_run), and what each did is the answer.
            reach = scheduler_run.CallAs(
                base_url,
                self.ca_path,
                self.credentials.access_key,
                self.credentials.secret_key,
                self.shims.node_instances,
            )
            runs = self.shims.scheduler.advance(
                float(call.params.get("seconds", 0)), reach, self.shims.lock
            )
            # And EC2's events of that clock: the Capacity Blocks' T-40 warnings.
            with self.shims.lock:
                blocks = [
                    (world.account, region, res)
                    for world in self.shims.worlds.values()
                    for (region, _), res in world.reservations.items()
                    if res.get("reservationType") == "capacity-block"
                ]
                due = self.shims.block_warnings.due(blocks, self.shims.scheduler.now())
            for account, region, sent in due:
                runs += block_events.deliver(account, region, sent, reach)
            return protocol.json_response({"runs": runs, "now": self.shims.scheduler.now()})
        if call.action == "SetBudgetSpend":
            return self._set_spend(call, base_url)
        if call.action == "SeedImage":
            image = self.shims.seed_image(call.account, {**call.params, "region": call.region})
            return protocol.json_response({"ImageId": image})
        return protocol.json_error(400, "InvalidAction", f"{call.action} is not an operation")

    def _set_spend(self, call: protocol.Call, base_url: str) -> tuple[int, dict[str, str], bytes]:
        """A budget's actual spend set: each notification it crosses is sent, to its email
        subscribers (kept here) and its SNS topic (published as AWS Budgets publishes, if
        the topic lets it); what was sent, and where."""
        name, amount = str(call.params.get("BudgetName", "")), call.params.get("Amount")
        if not isinstance(amount, int | float):
            return protocol.json_error(400, "ValidationException", "Amount is a number")
        with self.shims.lock:
            try:
                crossed = self.shims.budgets.set_spend(call.account, name, float(amount))
            except budgets.BudgetsError as err:
                return protocol.json_error(400, err.code, err.message)
        reach = scheduler_run.CallAs(
            base_url, self.ca_path, self.credentials.access_key, self.credentials.secret_key
        )
        sent = []
        for notice, budget in crossed:
            subject, text = budgets.message(budget, notice)
            for subscriber in notice.subscribers:
                address = subscriber["Address"]
                outcome = "delivered"
                if subscriber["SubscriptionType"] == "SNS":
                    outcome = _publish(reach, address, subject, text)
                sent.append(
                    {
                        "threshold": notice.notification.get("Threshold"),
                        "to": address,
                        "outcome": outcome,
                    }
                )
        return protocol.json_response({"sent": sent})

    def _kube(self, environ: dict[str, Any], body: bytes, start: StartResponse) -> Iterable[bytes]:
        """A sandbox EKS cluster's Kubernetes API: /k8s/ENDPOINT-ID/..."""
        _, _, endpoint, *rest = environ.get("PATH_INFO", "").split("/")
        headers = {
            k[5:].replace("_", "-").lower(): str(v)
            for k, v in environ.items()
            if k.startswith("HTTP_")
        }
        headers["content-type"] = environ.get("CONTENT_TYPE", "")
        programs = self.shims.kube.programs
        if not programs.base_url:
            # The address and certificate the in-cluster programs reach the API by.
            programs.base_url, programs.ca_path = _base_url(environ), self.ca_path
        self.shims.tick()
        status, out_headers, payload = self.shims.kube.handle(
            endpoint,
            environ.get("REQUEST_METHOD", "GET"),
            "/" + "/".join(rest),
            environ.get("QUERY_STRING", ""),
            headers,
            body,
            lambda cluster: sigv4.check_token(
                headers.get("authorization", ""), self.credentials, cluster, time.time()
            ),
        )
        return answer(start, status, out_headers, payload)


def _publish(reach: scheduler_run.CallAs, topic: str, subject: str, text: str) -> str:
    """Publish a budget notification to an SNS topic as AWS Budgets would: only if the
    topic's policy (and its KMS key's) lets budgets.amazonaws.com; the outcome."""
    from botocore.exceptions import BotoCoreError, ClientError

    region = topic.split(":")[3] if topic.count(":") >= 5 else "us-east-1"
    sns = reach.client(region, "sns")
    try:
        attributes = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
        key, key_policy = attributes.get("KmsMasterKeyId"), None
        if key and not str(key).startswith("alias/aws/"):
            kms = reach.client(region, "kms")
            key_policy = kms.get_key_policy(KeyId=key, PolicyName="default")["Policy"]
        refused = budgets.publish_refused(attributes, key_policy)
        if refused:
            return f"not delivered: {refused}"
        sns.publish(TopicArn=topic, Subject=subject, Message=text)
    except (BotoCoreError, ClientError) as err:
        return f"not delivered: {err}"
    return "delivered"


def _base_url(environ: dict[str, Any]) -> str:
    """The emulator's own https://host:port, as the client reached it."""
    return f"https://{environ.get('HTTP_HOST', '127.0.0.1')}"


def answer(
    start: StartResponse, status: int, headers: dict[str, str], payload: bytes
) -> Iterable[bytes]:
    """Start and carry one answer."""
    reason = {
        200: "OK",
        201: "Created",
        204: "No Content",
        403: "Forbidden",
        412: "Precondition Failed",
        400: "Bad Request",
        401: "Unauthorized",
        404: "Not Found",
        409: "Conflict",
        500: "Internal Server Error",
        503: "Service Unavailable",
    }.get(status, "Error")
    start(f"{status} {reason}", [*headers.items(), ("Content-Length", str(len(payload)))])
    return [payload]


def build_app(scale: float, credentials: sigv4.Credentials, ca_pem: bytes = b"") -> Emulator:
    """moto's application behind fmctl's (``ca_pem``: the certificate EKS clusters present
    as their certificate authority)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    from fmctl_sandbox import ec2_mend

    class Dispatcher(DomainDispatcherApplication):
        """moto's dispatcher, remembering which backend serves a host: moto finds it anew
        for every request (a listing of its package's folders, then a few hundred URL
        patterns), a twentieth of the emulator's time. Called under the dispatcher's lock."""

        def __init__(self) -> None:
            super().__init__(create_backend_app)
            self.hosts: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:
            if host not in self.hosts:
                self.hosts[host] = super().get_backend_for_host(host)
            return self.hosts[host]

    ec2_mend.mend()
    scheduler_run.mend()
    lambda_run.mend()
    return Emulator(
        Dispatcher(),
        Shims(scale=scale, ca_pem=ca_pem),
        credentials,
    )


def serve(
    port: int,
    scale: float,
    ready_file: str,
    credentials_file: str,
    wrap: Callable[[Emulator], App] | None = None,
) -> None:
    """Serve HTTPS until killed; announce port and certificate in ``ready_file``
    (``wrap``: what tests put around the application)."""
    import ssl

    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    from fmctl_sandbox.tls import make_certificate

    # The emulator itself must never look for real credentials or instance metadata either.
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    os.environ.setdefault("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
    folder = Path(ready_file).parent
    cert, key = make_certificate(folder)
    credentials = sigv4.Credentials.load(Path(credentials_file))

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
        """HTTP/1.1 with its connections kept, so clients reuse their TLS connections
        (botocore and the Kubernetes client pool them, as with AWS). werkzeug's own
        ``run_wsgi`` closes every connection ("Connection: close", then it reads whatever
        the socket still holds), since it cannot tell a body left unread from the next
        request: every call paid a TLS handshake on both sides, profiled at a third of an
        fmctl run's time. Here the emulator reads every request's body whole first
        (``read_body``), so one answered with its length leaves the connection at the
        next request; one whose body was not read, or that failed, closes it."""

        protocol_version = "HTTP/1.1"
        # TCP_NODELAY: an answer goes out as two writes (headers, then body), and on a kept
        # connection Nagle's algorithm held the second until the client's delayed ACK came,
        # 40 ms later: every call took 45 ms instead of a few.
        disable_nagle_algorithm = True

        def run_wsgi(self) -> None:
            if self.headers.get("Expect", "").lower().strip(" \t") == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.environ = environ = self.make_environ()
            started: list[Any] = []
            parts: list[bytes] = []

            def start_response(
                status: str, headers: list[tuple[str, str]], exc_info: Any = None
            ) -> Callable[[bytes], None]:
                if exc_info is not None and started:
                    raise exc_info[1].with_traceback(exc_info[2])
                started[:] = [status, headers]
                return parts.append

            try:
                result = self.server.app(environ, start_response)
                try:
                    parts.extend(result)
                finally:
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()
            except (ConnectionError, TimeoutError) as error:
                self.close_connection = True
                self.connection_dropped(error, environ)
                return
            if not started or not environ.get(BODY_READ):
                self.close_connection = True  # a failure, or a body left on the socket
            status, headers = started or ["500 Internal Server Error", []]
            code, _, reason = status.partition(" ")
            self.send_response(int(code), reason)
            payload = b"".join(parts)
            for key, value in headers:
                self.send_header(key, value)
            # A HEAD answer keeps the length its GET would have (S3's HeadObject).
            if "content-length" not in {key.lower() for key, _ in headers}:
                self.send_header("Content-Length", str(len(payload)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if environ["REQUEST_METHOD"] != "HEAD" and payload:
                self.wfile.write(payload)

    app = build_app(scale, credentials, cert.read_bytes())
    app.ca_path = str(cert)
    server = make_server(
        "127.0.0.1",
        port,
        wrap(app) if wrap else app,
        threaded=True,
        request_handler=KeepAliveHandler,
        ssl_context=context,
    )
    lambda_run.configure(
        scheduler_run.CallAs(
            f"https://127.0.0.1:{server.server_port}",
            str(cert),
            credentials.access_key,
            credentials.secret_key,
        )
    )
    tmp = f"{ready_file}.tmp"
    with open(tmp, "w") as fh:
        json.dump(
            {"port": server.server_port, "pid": os.getpid(), "scale": scale, "ca": str(cert)}, fh
        )
    os.replace(tmp, ready_file)
    # Stopped by SIGTERM (daemon.stop): the in-cluster programs stop with the sandbox.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        app.shims.kube.programs.stop_all()


def arguments() -> argparse.Namespace:
    """The command line ``daemon.ensure`` gives a server."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--scale", type=float, default=0.0)
    parser.add_argument("--ready-file", required=True)
    parser.add_argument("--credentials", required=True)
    return parser.parse_args()


def main() -> None:
    """Command-line entry."""
    args = arguments()
    serve(args.port, args.scale, args.ready_file, args.credentials)


if __name__ == "__main__":
    main()
