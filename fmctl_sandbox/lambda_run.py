"""AWS Lambda running the functions SNS invokes, which moto would run only in Docker (this
machine has none): the function's package is unpacked and its handler run in a process of
its own (``lambda_host``), as Lambda runs it.

What it follows (the Lambda Developer Guide: "Invoking Lambda with events from Amazon SNS",
"Asynchronous invocation", the Python runtime):

- SNS invokes a function asynchronously with one record (``EventSource`` aws:sns, the topic,
  subject and message); the publish does not wait for it.
- The handler runs as the function's execution role, which must trust
  ``lambda.amazonaws.com``; its calls are allowed only as the role's policies allow them
  (``iam_eval``), or fail with AccessDeniedException.
- The runtime gives the handler boto3, the region (``AWS_REGION``) and the function's
  environment variables; what it prints goes to ``/aws/lambda/NAME`` in CloudWatch Logs (the
  group is made if missing, as Lambda does).
- A failed asynchronous invocation is tried twice more.

The calls go back to the sandbox, over HTTPS with its own credentials (``configure``).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from typing import Any

from fmctl_sandbox import iam_eval
from fmctl_sandbox.scheduler_run import CallAs

PRINCIPAL = "lambda.amazonaws.com"
ATTEMPTS = 3
HOST = "fmctl_sandbox.lambda_host"


@dataclass
class Runs:
    """How functions are reached and what each invocation did."""

    reach: CallAs | None = None
    done: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)


RUNS = Runs()


def configure(reach: CallAs) -> None:
    """Where the functions' calls go: the sandbox itself (set once it listens)."""
    RUNS.reach = reach


@dataclass(frozen=True)
class Invocation:
    """A function as it was when SNS invoked it, and the event."""

    account: str
    region: str
    name: str
    handler: str
    code: bytes
    timeout: float
    environment: dict[str, str]
    role: str
    #: The role's policy documents, or why the role cannot be used.
    documents: list[Any] | str
    event: dict[str, Any]


def _event(topic: str, message: str, subject: str | None) -> dict[str, Any]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": f"{topic}:{uuid.uuid4()}",
                "Sns": {
                    "Type": "Notification",
                    "MessageId": str(uuid.uuid4()),
                    "TopicArn": topic,
                    "Subject": subject,
                    "Message": message,
                    "Timestamp": stamp,
                },
            }
        ]
    }


def invoke(backend: Any, name: str, message: str, subject: str | None, topic: str) -> None:
    """SNS's asynchronous invocation of ``name`` (called by moto's SNS, under the lock over
    AWS's state): the function is read now, and run in a thread of its own."""
    function = backend.get_function(name)
    # Its resource policy (AddPermission's statements; moto keeps them on the function).
    refused = _not_permitted({"Statement": list(function.policy.statements)}, topic)
    if refused:
        _said({"function": name, "attempts": 0, "exit": None, "output": refused})
        return
    invocation = Invocation(
        backend.account_id,
        backend.region_name,
        str(function.function_name),
        str(function.handler),
        bytes(function.code_bytes),
        float(function.timeout or 3),
        {str(k): str(v) for k, v in (function.environment_vars or {}).items()},
        str(function.role),
        iam_eval.role_documents(backend.account_id, str(function.role), PRINCIPAL),
        _event(topic, message, subject),
    )
    thread = threading.Thread(target=_run, args=(invocation,), daemon=True)
    with RUNS.lock:
        RUNS.threads.append(thread)
    thread.start()


def _not_permitted(policy: dict[str, Any], topic: str) -> str | None:
    """Why SNS may not invoke the function for ``topic`` (its resource policy must let
    sns.amazonaws.com lambda:InvokeFunction, for that topic when it names one), or None."""
    for statement in iam_eval.listed(policy.get("Statement")):
        principal = statement.get("Principal", {})
        service = principal.get("Service") if isinstance(principal, dict) else principal
        actions = iam_eval.listed(statement.get("Action"))
        source = statement.get("Condition", {}).get("ArnLike", {}).get("AWS:SourceArn")
        if (
            statement.get("Effect") == "Allow"
            and "sns.amazonaws.com" in iam_eval.listed(service)
            and any(a in ("lambda:InvokeFunction", "lambda:*") for a in actions)
            and source in (None, topic)
        ):
            return None
    return f"not invoked: its policy does not let sns.amazonaws.com invoke it for {topic}"


def _run(invocation: Invocation) -> None:
    outcome: dict[str, Any] = {"function": invocation.name, "attempts": 0}
    for attempt in range(1, ATTEMPTS + 1):
        outcome["attempts"] = attempt
        code, output = _once(invocation)
        outcome.update(exit=code, output=output)
        _log(invocation, output)
        if code == 0:
            break
    _said(outcome)


def _said(outcome: dict[str, Any]) -> None:
    """Keep what an invocation did, and say it in the server's log."""
    print(f"sandbox: lambda {json.dumps(outcome)}", file=sys.stderr, flush=True)
    with RUNS.lock:
        RUNS.done.append(outcome)


def _once(invocation: Invocation) -> tuple[int, str]:
    reach = RUNS.reach
    if reach is None:
        return 1, "the sandbox has no address for the function's calls yet"
    if isinstance(invocation.documents, str):
        return 1, f"AccessDenied: {invocation.documents}"
    with tempfile.TemporaryDirectory(prefix="fmctl-lambda-") as folder:
        zipfile.ZipFile(io.BytesIO(invocation.code)).extractall(folder)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            **invocation.environment,
            "AWS_ENDPOINT_URL": reach.endpoint,
            "AWS_CA_BUNDLE": reach.ca,
            "AWS_ACCESS_KEY_ID": reach.key,
            "AWS_SECRET_ACCESS_KEY": reach.secret,
            "AWS_REGION": invocation.region,
            "AWS_DEFAULT_REGION": invocation.region,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_LAMBDA_FUNCTION_NAME": invocation.name,
            "FMCTL_LAMBDA_ROLE": invocation.role,
            "FMCTL_LAMBDA_ACCOUNT": invocation.account,
            "FMCTL_LAMBDA_POLICIES": json.dumps(invocation.documents),
        }
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "fmctl_sandbox.lambda_host",
                    folder,
                    invocation.handler,
                ],
                input=json.dumps(invocation.event),
                capture_output=True,
                text=True,
                env=env,
                timeout=invocation.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return 1, f"Task timed out after {invocation.timeout:.0f} seconds"
    return done.returncode, (done.stdout + done.stderr).strip()


def _log(invocation: Invocation, output: str) -> None:
    """What the function said, to its log group, as Lambda writes it."""
    from botocore.exceptions import BotoCoreError, ClientError

    reach = RUNS.reach
    if reach is None or not output:
        return
    logs = reach.client(invocation.region, "logs")
    group, stream = f"/aws/lambda/{invocation.name}", f"sandbox/{uuid.uuid4().hex}"
    try:
        try:
            logs.create_log_group(logGroupName=group)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
                raise
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        now = int(time.time() * 1000)
        logs.put_log_events(
            logGroupName=group,
            logStreamName=stream,
            logEvents=[{"timestamp": now, "message": line} for line in output.splitlines()],
        )
    except (BotoCoreError, ClientError) as err:
        print(f"sandbox: could not log {invocation.name}'s output: {err}", file=sys.stderr)


def settle(timeout: float = 60.0) -> list[dict[str, Any]]:
    """Wait for the invocations under way; what every one did (for tests)."""
    deadline = time.monotonic() + timeout
    with RUNS.lock:
        threads = list(RUNS.threads)
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.0))
    with RUNS.lock:
        return list(RUNS.done)


def mend() -> None:
    """SNS's deliveries to Lambda run the function here (see the module's docstring)."""
    from moto.awslambda.models import LambdaBackend
    from moto.sns.models import Subscription

    if getattr(LambdaBackend, "_fmctl_mended", False):
        return
    publish = Subscription.publish

    def deliver(self: Any, message: str, *args: Any, **kwargs: Any) -> Any:
        if self.protocol != "lambda":
            return publish(self, message, *args, **kwargs)
        from moto.awslambda.utils import get_backend

        parts = self.endpoint.split(":")
        backend = get_backend(self.account_id, parts[3])
        subject = kwargs.get("subject")
        invoke(backend, parts[6], message, subject, str(self.topic.arn))
        return None

    Subscription.publish = deliver  # type: ignore[method-assign]
    LambdaBackend._fmctl_mended = True  # type: ignore[attr-defined]
