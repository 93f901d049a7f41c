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
from typing import Any

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
