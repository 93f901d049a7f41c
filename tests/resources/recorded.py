"""AWS answers recorded by AWS, for the kinds' read and diff unit tests.

The answers are AWS's own published examples (the AWS CLI and API reference examples that
botocore ships as ``data/SERVICE/VERSION/examples-1.json``), with fmctl's ownership tags added
where a resource fmctl made would carry them. Where AWS publishes no example for an
operation, the test writes the answer itself; either way botocore's ``Stubber`` checks every
answer against the service's own model (a field AWS does not send is refused), and fails a
call the test did not expect — so a read that tried to write, or called more than it should,
fails the test. Nothing leaves the process.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import threading
from typing import Any

from provisioner.drivers.aws_errors import typed_errors

ACCOUNT = "123456789012"


def example(service: str, operation: str, index: int = 0) -> dict[str, Any]:
    """AWS's published example answer of ``operation`` (a deep copy)."""
    import botocore

    root = os.path.join(os.path.dirname(botocore.__file__), "data", service)
    files = sorted(glob.glob(os.path.join(root, "*", "examples-1.json")))
    with open(files[-1]) as fh:
        found = json.load(fh)["examples"][operation]
    answer: dict[str, Any] = copy.deepcopy(found[index]["output"])
    return answer


def tags(cluster: str, resource: str, **extra: str) -> list[dict[str, str]]:
    """The tags fmctl puts on a resource of cluster ``cluster``."""
    values = {
        "fmctl.dev/cluster": cluster,
        "fmctl.dev/resource": resource,
        "fmctl.dev/created-at": "2026-11-30T10:00:00Z",
        **extra,
    }
    return [{"Key": k, "Value": v} for k, v in values.items()]


class RecordedAws:
    """What kinds reach as ``ctx.aws``: botocore clients answering from the answers queued
    with ``answer``; nothing else is answered."""

    sandbox = False
    read_only = True

    def __init__(self, region: str = "us-east-1") -> None:
        self.region = region
        self._clients: dict[str, Any] = {}
        self._stubs: dict[str, Any] = {}

    def client(self, service: str, retries: bool = True) -> Any:
        """A client of ``service`` whose answers are the queued ones."""
        if service not in self._clients:
            import boto3
            from botocore.stub import Stubber

            client = boto3.client(
                service,
                region_name=self.region,
                aws_access_key_id="recorded",
                aws_secret_access_key="recorded",
                endpoint_url="https://127.0.0.1:9",  # never reached: the stubber answers
            )
            # The product's clients raise its typed errors (drivers.aws_errors): so do these.
            typed_errors(client)
            stub = Stubber(client)
            stub.activate()
            self._clients[service], self._stubs[service] = client, stub
        return self._clients[service]

    def answer(
        self,
        service: str,
        operation: str,
        response: dict[str, Any],
        expected: dict[str, Any] | None = None,
    ) -> None:
        """Queue the answer to the next ``operation`` call; with ``expected``, the call must
        carry exactly those parameters."""
        from botocore import xform_name

        self.client(service)
        self._stubs[service].add_response(xform_name(operation), response, expected)

    def fail(
        self,
        service: str,
        operation: str,
        code: str,
        status: int = 400,
        expected: dict[str, Any] | None = None,
    ) -> None:
        """Queue an error answer (``expected``: as for ``answer``)."""
        from botocore import xform_name

        self.client(service)
        self._stubs[service].add_client_error(
            xform_name(operation),
            service_error_code=code,
            http_status_code=status,
            expected_params=expected,
        )

    def done(self) -> None:
        """Every queued answer was asked for."""
        for stub in self._stubs.values():
            stub.assert_no_pending_responses()

    def account_id(self) -> str:
        return ACCOUNT


def lose_answer(
    aws: RecordedAws,
    service: str,
    operation: str,
    response: dict[str, Any],
    expected: dict[str, Any] | None = None,
) -> None:
    """Queue ``operation``'s answer and lose it: AWS does the work (the stubber takes the
    call and its parameters), and the caller sees the connection drop before the answer,
    as botocore reports it (``ConnectionClosedError``). Once, and on the next call of
    ``operation`` whatever answer the stubber gives it: queue it when that call is next."""
    from botocore.exceptions import ConnectionClosedError

    aws.answer(service, operation, response, expected)
    client = aws.client(service)
    event = f"after-call.{client.meta.service_model.service_id.hyphenize()}.{operation}"

    def drop(**_: Any) -> None:
        client.meta.events.unregister(event, drop, unique_id="fmctl-lose-answer")
        raise ConnectionClosedError(endpoint_url=client.meta.endpoint_url)

    client.meta.events.register(event, drop, unique_id="fmctl-lose-answer")


class RecordedKube:
    """What the in-cluster kinds reach as a Kubernetes API (``KubeApi``): the objects a test
    lays in the cluster, answered as the API server answers (a list by equality label
    selector, a get by name, server-side apply returning the live object with the status the
    cluster keeps, delete saying whether it was there); every call kept in ``calls``. What
    the kinds never ask of it (logs, cordon, eviction) fails the test."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        #: Held by every call, as the API server serializes writes to one store: fmctl
        #: applies in parallel threads. A test that changes objects meanwhile holds it too.
        self.lock = threading.RLock()

    @staticmethod
    def _key(api_version: str, kind: str, name: str, namespace: str) -> tuple[str, str, str, str]:
        return (api_version, kind, namespace, name)

    def put(self, obj: dict[str, Any]) -> None:
        """Lay ``obj`` in the cluster (as it would be after an apply), status included."""
        with self.lock:
            meta = obj["metadata"]
            key = self._key(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace", ""))
            self.objects[key] = copy.deepcopy(obj)

    def apply(self, obj: dict[str, Any], force: bool = False) -> dict[str, Any]:
        with self.lock:
            meta = obj["metadata"]
            key = self._key(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace", ""))
            self.calls.append(
                ("apply", f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}")
            )
            live = copy.deepcopy(obj)
            if key in self.objects and "status" in self.objects[key]:
                live["status"] = self.objects[key]["status"]  # the cluster's, not the applier's
            self.objects[key] = live
            return copy.deepcopy(live)

    def get(
        self, api_version: str, kind: str, name: str, namespace: str = ""
    ) -> dict[str, Any] | None:
        with self.lock:
            self.calls.append(("get", f"{kind}/{namespace}/{name}"))
            found = self.objects.get(self._key(api_version, kind, name, namespace))
            return copy.deepcopy(found) if found is not None else None

    def list(
        self, api_version: str, kind: str, namespace: str = "", selector: str = ""
    ) -> list[dict[str, Any]]:
        with self.lock:
            self.calls.append(("list", f"{kind} {selector}"))
            out = []
            for (version, k, ns, _), obj in sorted(self.objects.items()):
                if (version, k) != (api_version, kind) or (namespace and ns != namespace):
                    continue
                labels = obj["metadata"].get("labels") or {}
                if all(_selects(term, labels) for term in selector.split(",") if term):
                    out.append(copy.deepcopy(obj))
            return out

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> bool:
        with self.lock:
            self.calls.append(("delete", f"{kind}/{namespace}/{name}"))
            return self.objects.pop(self._key(api_version, kind, name, namespace), None) is not None

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        raise AssertionError(f"logs of {namespace}/{pod} were not expected")

    def cordon(self, node: str, labels: dict[str, str | None] | None = None) -> None:
        raise AssertionError(f"cordon of {node} was not expected")

    def label(self, node: str, labels: dict[str, str | None]) -> None:
        raise AssertionError(f"labels of {node} were not expected")

    def evict(self, namespace: str, pod: str) -> bool:
        raise AssertionError(f"eviction of {namespace}/{pod} was not expected")


def _selects(term: str, labels: dict[str, str]) -> bool:
    """One term of a label selector, as the API server reads it: ``key=value``, ``key``
    (exists) or ``!key`` (does not)."""
    if term.startswith("!"):
        return term[1:] not in labels
    if "=" in term:
        key, value = term.split("=", 1)
        return labels.get(key) == value
    return term in labels
