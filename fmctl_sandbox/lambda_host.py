"""One Lambda invocation in its own process (``lambda_run``): the handler of the unpacked
package gets the event from standard input; every AWS call it makes (through boto3, so
botocore) is first judged against the execution role's policies (``iam_eval``), as IAM
judges it, and refused with AccessDeniedException when they do not allow it.

Run: ``python -m fmctl_sandbox.lambda_host FOLDER MODULE.FUNCTION`` with the
environment ``lambda_run`` sets.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

from fmctl_sandbox import iam_eval


def _guard(model: Any, params: dict[str, Any], **_: Any) -> None:
    from botocore.exceptions import ClientError

    service = str(model.service_model.signing_name)
    action = model.name[0].lower() + model.name[1:]
    role = os.environ["FMCTL_LAMBDA_ROLE"]
    why = iam_eval.refused(
        json.loads(os.environ["FMCTL_LAMBDA_POLICIES"]),
        role.rsplit("/", 1)[-1],
        service,
        action,
        os.environ["AWS_REGION"],
        os.environ["FMCTL_LAMBDA_ACCOUNT"],
        params,
    )
    if why:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": why}}, model.name)


def _judge_every_call() -> None:
    """Every client the handler makes (boto3's are botocore's) has its calls judged first:
    at botocore's one door for API calls, so this host needs no SDK of its own."""
    from botocore.client import BaseClient

    # Private to botocore (so not in its stubs), and the one method every call goes through.
    send = BaseClient._make_api_call  # type: ignore[attr-defined]

    def judged(self: Any, operation: str, params: dict[str, Any]) -> Any:
        _guard(self.meta.service_model.operation_model(operation), params)
        return send(self, operation, params)

    BaseClient._make_api_call = judged  # type: ignore[attr-defined]


def main() -> int:
    """Run the handler once; 0 when it returned, 1 when it raised."""
    folder, handler = sys.argv[1], sys.argv[2]
    _judge_every_call()
    sys.path.insert(0, folder)
    module, function = handler.rsplit(".", 1)
    event = json.loads(sys.stdin.read())
    try:
        result = getattr(importlib.import_module(module), function)(event, None)
    except Exception as exc:  # noqa: BLE001 - Lambda reports any failure of the handler, then retries
        print(json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}))
        return 1
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
