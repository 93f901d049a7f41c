"""The tests' double of the sandbox emulator: the product's application
(``fmctl_sandbox.server.Emulator``) wrapped with what only tests need, so that none of
it ships in the wheel.

- a request log: every call seen, with its service, action, query string, signing key, the
  caller's product token from its User-Agent (``agent``: ``fmctl/VERSION`` for the product's
  own clients, ``drivers.aws.Aws.agent``), the IAM names an IAM call acts on and the roles a
  call passes (for tests/tools/permissions.py), status and fault;
- fault injection (``FaultRule``): errors, dropped connections, answers lost after the call
  was carried out, slow answers — for AWS calls and for the clusters' Kubernetes APIs;
- the nodes' tools folder: the programs the sandbox's pods and Run Command scripts find
  first on PATH (``kube_jobs``, ``ssm_agent``).

Control endpoints, for the test that started it only (each request carries the sandbox's
secret key in ``X-Fmctl-Secret``; anyone else gets 403):
  GET  /_fmctl/requests          -> the request log (?since=N: {total, entries from N})
  POST /_fmctl/faults            <- {"rules": [...]}: replaces the rules
  POST /_fmctl/seed/node-tools   <- {"path": DIR or null}
  POST /_fmctl/pcs/hold          <- {"id": CLUSTER-ID, "hold": true|false}: a PCS cluster
                                    stays Creating until released (a real create takes
                                    minutes; at the sandbox's scale a test could not
                                    otherwise be sure to reach it while it is Creating)
  POST /_fmctl/pcs/terminate     <- {"region": R, "instance": ID, "why": TEXT}: PCS ends an
                                    instance of a node group (a lifecycle script of its
                                    failed: onError TERMINATE) and the group launches
                                    another (tests/tools/standin/pcs_fleet.py)
  GET  /_fmctl/node-faults       -> every InjectNodeFault the sandbox was asked for
                                    (`fmctl sandbox fault`), in order: {region,
                                    cluster, node, fault}, so that a harness playing
                                    an instance's hardware gives its node the fault
                                    (tests/tools/standin/pcs_fleet.py)

Run by ``daemon.ensure(home, scale, server=MODULE, cwd=ROOT)`` (see ``harness.start``), with
the product server's command line.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import random
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fmctl_sandbox import daemon, protocol, sigv4
from fmctl_sandbox.server import (
    KUBE_PREFIX,
    Emulator,
    StartResponse,
    answer,
    arguments,
    read_body,
    serve,
)

MODULE = "tests.tools.sandbox_doubles"
#: The services whose calls hand a role to AWS (EKS's cluster, node group and pod identity
#: roles, a function's, a schedule's and a rule target's): the role ARNs in their bodies
#: are roles passed (iam:PassRole), which the permission check judges.
PASSING = frozenset({"eks", "lambda", "scheduler", "events"})
ROLE_KEYS = frozenset({"rolearn", "role", "noderole", "serviceaccountrolearn"})
#: The parameters that say which IAM resource a call acts on.
IAM_NAMES = frozenset({"RoleName", "InstanceProfileName", "PolicyArn", "PolicyName", "Path"})
ROOT = Path(__file__).resolve().parents[2]


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
        """Whether this call is hit (and count it)."""
        if self.action not in ("*", action):
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        if rng.random() >= self.share:
            return False
        self.hits += 1
        return True


class ConnectionDropped(ConnectionError):
    """Raised to make werkzeug drop the connection (a connection reset for the client); a
    ``ConnectionError``, so werkzeug does not log it as a failure of the server's."""


def _drop_connection(environ: dict[str, Any], action: str) -> None:
    """Close the socket under the request: the client sees a connection reset."""
    sock = environ.get("werkzeug.socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    raise ConnectionDropped(action)


def _passed_roles(body: bytes) -> list[str]:
    """The roles a request hands over: the values of its role parameters (botocore's models:
    EKS's roleArn, nodeRole and serviceAccountRoleArn, Lambda's Role, Scheduler's and
    EventBridge's targets' RoleArn), wherever they sit in its JSON body. Other role ARNs in
    a body are not passed (EKS's access entry names its principal by principalArn)."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return []
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key.lower() in ROLE_KEYS and isinstance(value, str):
                    found.add(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(data)
    return sorted(found)


def _agent(user_agent: str) -> str | None:
    """The fmctl product token of a User-Agent (botocore appends ``user_agent_extra`` as
    its last tokens), or None for another caller (the sandbox's own schedules, a function's
    boto3, the AWS CLI on a node)."""
    return next((t for t in user_agent.split() if t.startswith("fmctl")), None)


@dataclass
class Doubles:
    """WSGI app: control endpoints, the log and faults, then the product's emulator."""

    app: Emulator
    rules: list[FaultRule] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    #: The faults asked for through InjectNodeFault, in order (GET /_fmctl/node-faults).
    node_faults: list[dict[str, Any]] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        body = read_body(environ)
        if path.startswith("/_fmctl/"):
            return self._control(environ, path, body, start)
        kube = path.startswith(KUBE_PREFIX)
        auth = str(environ.get("HTTP_AUTHORIZATION", ""))
        if kube:
            rest = path.split("/", 3)[3] if path.count("/") >= 3 else ""
            service, action = "kubernetes", f"{environ.get('REQUEST_METHOD')} /{rest}"
            key = sigv4.token_key(auth)
            call = None
        else:
            call = protocol.parse(environ, body)
            service, action, key = call.service, call.action, protocol.access_key_of(environ)
        if service == protocol.SANDBOX_SERVICE:  # the sandbox's own, not an AWS call
            answered = self.app(environ, start)
            if call is not None and call.action == "InjectNodeFault":
                # Recorded once the sandbox has acted on it (its PCS may have replaced the
                # instance already): a harness that reads it sees the instance as it is.
                asked = {k: call.params.get(k) for k in ("cluster", "node", "fault")}
                asked["region"] = call.region
                with self.lock:
                    self.node_faults.append(asked)
            return answered
        entry: dict[str, Any] = {
            "service": service,
            "action": action,
            "access_key": key,
            "agent": _agent(str(environ.get("HTTP_USER_AGENT", ""))),
            # A REST call's query names its operation as much as its path does (S3's ?delete).
            "query": str(environ.get("QUERY_STRING", "")),
            # What an IAM call acts on (the permission check holds fmctl to its own names).
            "names": {k: v for k, v in (call.params if call else {}).items() if k in IAM_NAMES}
            if service == "iam"
            else {},
            "passes": _passed_roles(body) if service in PASSING else [],
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
                    if (r.action == "kubernetes") == kube
                    and r.applies("kubernetes" if kube else action, self.rng)
                ),
                None,
            )
        if rule is not None:
            entry["fault"] = rule.kind
            if rule.kind == "reset":
                _drop_connection(environ, action)
            if rule.kind == "reset-after":
                # The call is carried out, then the answer is lost: what makes a retried
                # create without a client token produce a duplicate.
                for _ in self.app(environ, lambda *args: lambda data: None):
                    pass
                entry["status"] = "executed"
                _drop_connection(environ, action)
            if rule.kind == "slow":
                time.sleep(rule.delay)
            elif call is None:
                failure = json.dumps({"kind": "Status", "code": rule.status}).encode()
                entry["status"] = rule.status
                return answer(start, rule.status, {"Content-Type": "application/json"}, failure)
            else:
                status, headers, payload = protocol.error_for(
                    call, rule.status, rule.code, f"injected by the sandbox: {rule.code}"
                )
                entry["status"] = status
                return answer(start, status, headers, payload)

        def recording_start(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            entry["status"] = int(status.split()[0])
            return start(status, headers, exc_info) if exc_info else start(status, headers)

        return self.app(environ, recording_start)

    def _control(
        self, environ: dict[str, Any], path: str, body: bytes, start: StartResponse
    ) -> Iterable[bytes]:
        given = str(environ.get("HTTP_X_FMCTL_SECRET", ""))
        if not hmac.compare_digest(given, self.app.credentials.secret_key):
            return answer(start, 403, {"Content-Type": "application/json"}, b'{"error":"no"}')
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/_fmctl/requests":
            query = urllib.parse.parse_qs(str(environ.get("QUERY_STRING", "")))
            with self.lock:
                if "since" in query:  # what the caller has not read yet, and the log's length
                    since = int(query["since"][0])
                    data: Any = {"total": len(self.log), "entries": self.log[since:]}
                else:
                    data = list(self.log)
        elif path == "/_fmctl/node-faults":
            with self.lock:
                data = list(self.node_faults)
        elif path == "/_fmctl/faults" and method == "POST":
            rules = json.loads(body or b"{}").get("rules", [])
            with self.lock:
                self.rules = [FaultRule(**r) for r in rules]
            data = {"rules": len(rules)}
        elif path == "/_fmctl/seed/node-tools" and method == "POST":
            self.app.shims.kube.node_tools = json.loads(body).get("path")
            data = {"ok": True}
        elif path == "/_fmctl/pcs/hold" and method == "POST":
            data = self._hold(json.loads(body))
        elif path == "/_fmctl/pcs/terminate" and method == "POST":
            data = self._terminate(json.loads(body))
        else:
            return answer(start, 404, {"Content-Type": "application/json"}, b'{"error":"no"}')
        return answer(start, 200, {"Content-Type": "application/json"}, json.dumps(data).encode())

    def _terminate(self, ask: dict[str, Any]) -> dict[str, Any]:
        """End a PCS node group's instance as PCS does when its lifecycle script fails; the
        group keeps its minimum (``sandbox.pcs.Pcs.terminate``)."""
        region, instance = str(ask["region"]), str(ask["instance"])
        with self.app.shims.lock:
            for world in self.app.shims.worlds.values():
                for (where, _), thing in list(world.pcs.things.items()):
                    if where == region and thing.kind == "group" and instance in thing.instances:
                        world.pcs.terminate(region, thing, instance)
                        return {"terminated": instance}
        return {"terminated": None}

    def _hold(self, ask: dict[str, Any]) -> dict[str, Any]:
        """Hold a PCS cluster in its create (ready at no time), or let it land now."""
        with self.app.shims.lock:
            for world in self.app.shims.worlds.values():
                for (_, ident), thing in world.pcs.things.items():
                    if ident == ask["id"] and thing.kind == "cluster":
                        thing.ready_at = float("inf") if ask["hold"] else time.monotonic()
                        return {"held": bool(ask["hold"])}
        return {"held": None}


def control(home: Path, path: str, body: Any = None) -> Any:
    """Call a control endpoint of the double running for ``home``; JSON in and out."""
    info = daemon.running(home)
    assert info is not None, f"no sandbox runs for {home}"
    context = ssl.create_default_context(cafile=info["ca"])
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"https://127.0.0.1:{info['port']}{path}",
        data=data,
        method="POST" if data is not None else "GET",
        headers={"X-Fmctl-Secret": daemon.credentials(home).secret_key},
    )
    # Each waits for the emulator's lock behind whatever else holds it: on a loaded machine
    # that can be seconds (AdvanceClock timed out at 5 s on CI).
    with urllib.request.urlopen(request, timeout=60, context=context) as reply:
        return json.loads(reply.read())


def start(home: Path, scale: float) -> dict[str, Any]:
    """Start the double for ``home`` (the product's commands then find it running)."""
    daemon.ensure(home, scale, server=MODULE, cwd=ROOT)
    info = daemon.running(home)
    assert info is not None
    return info


def main() -> None:
    """Command-line entry: the product server's arguments, the doubles around its app."""
    args = arguments()
    serve(args.port, args.scale, args.ready_file, args.credentials, wrap=Doubles)


if __name__ == "__main__":
    main()
