"""AWS's error codes, turned into typed errors in one place.

Each AWS API names its failures its own way: a missing IAM role is ``NoSuchEntity``, a
missing EKS cluster ``ResourceNotFoundException``, a missing VPC ``InvalidVpcID.NotFound``,
a missing S3 key a bare ``404``. Callers should not each know every spelling. ``RULES``
below maps (service, operation, code) to a problem class, and ``typed_errors`` makes a
client raise, for a classified code, botocore's own exception class for the code mixed with
the problem class: ``except NotFound`` catches what it says, while ``except ClientError``,
``client.exceptions.X``, botocore's waiters and ``drivers.aws.error_code`` see what they
always saw.

The problem classes import nothing from botocore, so naming one in an ``except`` costs a
command that never calls AWS nothing (`validate` stays free of the SDK).
"""

from __future__ import annotations

import fnmatch
import threading
from dataclasses import dataclass
from typing import Any


class AwsProblem(Exception):
    """An AWS error answer of a known meaning. Every instance is also botocore's
    ``ClientError`` for the code (``response``, ``operation_name``, as botocore sets them)."""

    response: dict[str, Any]
    operation_name: str

    @property
    def code(self) -> str:
        """AWS's error code, as it answered."""
        return str(self.response.get("Error", {}).get("Code", ""))


class NotFound(AwsProblem):
    """What the call names does not exist (or no longer does)."""


class BucketNotFound(NotFound):
    """An S3 call's bucket does not exist (as against a key in it)."""


class KeyNotFound(NotFound):
    """An S3 object does not exist (GetObject's NoSuchKey; HeadObject's bare 404, which
    a missing bucket answers too)."""


class Unset(AwsProblem):
    """The resource exists; the setting the call reads (a bucket's tags, policy, default
    encryption, public access block) was never set."""


class Conflict(AwsProblem):
    """The request conflicts with what AWS holds: a resource of that name, or a change
    under way. Services that do not say which answer this class itself; the caller looks."""


class AlreadyExists(Conflict):
    """A create found the resource (or the rule, the statement) there already."""


class WrongState(Conflict):
    """The resource's state refuses the request now (being created, changed or deleted);
    the same request may pass once that settles."""


class InUse(AwsProblem):
    """Something else still uses the resource (DependencyViolation): a delete may pass once
    its dependents are gone."""


class Throttled(AwsProblem):
    """AWS refused the call's rate (botocore has already retried it)."""


class AccessDenied(AwsProblem):
    """The credentials lack a permission for the call."""


class QuotaExceeded(AwsProblem):
    """An account quota (or a limit of concurrent creates) refuses the call."""


class Invalid(AwsProblem):
    """AWS refused a parameter's value or form (an id of the wrong shape, a filter value
    it does not know)."""


class ConditionFailed(AwsProblem):
    """An S3 conditional write lost: the object is not as the condition said, or another
    conditional write to it was in flight."""


@dataclass(frozen=True)
class Rule:
    """One row: an error ``code`` (a glob) of ``service`` ("*": any), from the operations
    matching ``operations`` (a glob), whose message contains ``message`` (lower case; ""
    for any), means ``problem``. ``source``: where AWS documents the code ("model": the
    service's botocore model lists it as an error shape, which tests/drivers check)."""

    service: str
    code: str
    problem: type[AwsProblem]
    source: str
    operations: str = "*"
    message: str = ""

    def matches(self, service: str, operation: str, code: str, message: str) -> bool:
        """True when this row applies to the answer."""
        return (
            self.service in ("*", service)
            and fnmatch.fnmatchcase(code, self.code)
            and fnmatch.fnmatchcase(operation, self.operations)
            and self.message in message.lower()
        )


EC2_ERRORS = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html"
S3_ERRORS = "https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html"
S3_HEAD = "https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html"
S3_CONDITIONS = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html"
RETRIES = "https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html"
PCS_ERRORS = "https://docs.aws.amazon.com/pcs/latest/APIReference/CommonErrors.html"
LAMBDA_CREATE = "https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html"
AUTOSCALING_TERMINATE = (
    "https://docs.aws.amazon.com/autoscaling/ec2/APIReference/"
    "API_TerminateInstanceInAutoScalingGroup.html"
)

#: First match wins: the rows of one service and operation come before the general ones.
RULES: tuple[Rule, ...] = (
    # S3: a HEAD answer has no body, so its error is the status alone ("404", or botocore's
    # "NotFound"): HeadBucket's is the bucket's, HeadObject's the key's.
    Rule("s3", "NoSuchBucket", BucketNotFound, S3_ERRORS),
    Rule("s3", "404", BucketNotFound, S3_HEAD, operations="HeadBucket"),
    Rule("s3", "NotFound", BucketNotFound, S3_HEAD, operations="HeadBucket"),
    Rule("s3", "NoSuchKey", KeyNotFound, S3_ERRORS),
    Rule("s3", "404", KeyNotFound, S3_HEAD),
    Rule("s3", "NotFound", KeyNotFound, S3_HEAD),
    Rule("s3", "NoSuchTagSet", Unset, S3_ERRORS),
    Rule("s3", "NoSuchBucketPolicy", Unset, S3_ERRORS),
    Rule("s3", "NoSuchPublicAccessBlockConfiguration", Unset, S3_ERRORS),
    Rule("s3", "ServerSideEncryptionConfigurationNotFoundError", Unset, S3_ERRORS),
    Rule("s3", "403", AccessDenied, S3_HEAD),
    Rule("s3", "BucketAlreadyOwnedByYou", AlreadyExists, "model"),
    Rule("s3", "PreconditionFailed", ConditionFailed, S3_CONDITIONS),
    Rule("s3", "ConditionalRequestConflict", ConditionFailed, S3_CONDITIONS),
    # EC2 models no error shapes: its codes are on its error page, NotFound ones as
    # "InvalidXxx.NotFound" (and "InvalidXxxID.NotFound"), duplicates as "*.Duplicate".
    Rule("ec2", "InvalidPlacementGroup.InUse", InUse, EC2_ERRORS),
    Rule("ec2", "DependencyViolation", InUse, EC2_ERRORS),
    Rule("ec2", "*NotFound", NotFound, EC2_ERRORS),  # NatGatewayNotFound has no dot
    Rule("ec2", "*.Unknown", NotFound, EC2_ERRORS),
    Rule("ec2", "*.Duplicate", AlreadyExists, EC2_ERRORS),
    Rule("ec2", "*AlreadyExists*", AlreadyExists, EC2_ERRORS),
    Rule("ec2", "InvalidSubnet.Conflict", AlreadyExists, EC2_ERRORS),
    Rule("ec2", "UnauthorizedOperation", AccessDenied, EC2_ERRORS),
    Rule("ec2", "*.Malformed", Invalid, EC2_ERRORS),
    Rule("ec2", "InvalidParameterValue*", Invalid, EC2_ERRORS),
    # IAM (query protocol: the code is the shape's "error code", not its name).
    Rule("iam", "NoSuchEntity", NotFound, "model"),
    Rule("iam", "EntityAlreadyExists", AlreadyExists, "model"),
    Rule("iam", "DeleteConflict", InUse, "model"),
    # EKS: "in use" from a create is the thing already there; from a delete, its users.
    Rule("eks", "ResourceInUseException", AlreadyExists, "model", operations="Create*"),
    Rule("eks", "ResourceInUseException", AlreadyExists, "model", operations="Associate*"),
    Rule("eks", "ResourceInUseException", InUse, "model"),
    # PCS says ConflictException both for a name taken and for a change under way (its
    # common errors page), so the class says no more.
    Rule("pcs", "ConflictException", Conflict, PCS_ERRORS),
    Rule("scheduler", "ConflictException", Conflict, "model"),
    Rule("lambda", "ResourceConflictException", Conflict, "model"),
    # A role made moments ago that Lambda cannot assume yet: IAM's changes spread in seconds.
    Rule(
        "lambda",
        "InvalidParameterValueException",
        WrongState,
        LAMBDA_CREATE,
        operations="CreateFunction",
        message="assume",
    ),
    Rule("budgets", "DuplicateRecordException", AlreadyExists, "model"),
    Rule("kms", "KMSInvalidStateException", WrongState, "model"),
    Rule("fsx", "FileSystemNotFound", NotFound, "model"),
    Rule("fsx", "DataRepositoryAssociationNotFound", NotFound, "model"),
    Rule("sns", "NotFound", NotFound, "model"),
    Rule("service-quotas", "NoSuchResourceException", NotFound, "model"),
    # An instance no group has (any more): EC2 Auto Scaling's generic ValidationError.
    Rule(
        "autoscaling",
        "ValidationError",
        NotFound,
        AUTOSCALING_TERMINATE,
        operations="TerminateInstanceInAutoScalingGroup",
        message="not found",
    ),
    Rule(
        "cloudformation",
        "ValidationError",
        NotFound,
        "https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DescribeStacks.html",
        operations="DescribeStacks",
        message="does not exist",
    ),
    # The spellings many JSON-protocol services share.
    Rule("*", "ResourceNotFoundException", NotFound, "model"),
    Rule("*", "NotFoundException", NotFound, "model"),
    Rule("*", "ResourceAlreadyExistsException", AlreadyExists, "model"),
    Rule("*", "ServiceQuotaExceededException", QuotaExceeded, "model"),
    Rule("*", "LimitExceededException", QuotaExceeded, "model"),
    Rule("*", "AccessDenied", AccessDenied, "model"),
    Rule("*", "AccessDeniedException", AccessDenied, "model"),
    # Credentials the service does not know (as a region without the service answers).
    Rule("*", "UnrecognizedClientException", AccessDenied, PCS_ERRORS),
    Rule("*", "Throttling", Throttled, RETRIES),
    Rule("*", "ThrottlingException", Throttled, RETRIES),
    Rule("*", "ThrottledException", Throttled, RETRIES),
    Rule("*", "RequestLimitExceeded", Throttled, RETRIES),
    Rule("*", "TooManyRequestsException", Throttled, RETRIES),
    Rule("*", "RequestThrottled", Throttled, RETRIES),
    Rule("*", "RequestThrottledException", Throttled, RETRIES),
    Rule("*", "SlowDown", Throttled, RETRIES),
    Rule("*", "EC2ThrottledException", Throttled, RETRIES),
    Rule("*", "PriorRequestNotComplete", Throttled, RETRIES),
)


def classify(service: str, operation: str, code: str, message: str = "") -> type[AwsProblem] | None:
    """The problem class of an error answer, or None for a code of no known meaning."""
    for rule in RULES:
        if rule.matches(service, operation, code, message):
            return rule.problem
    return None


_combined: dict[tuple[type[Exception], type[AwsProblem]], type[Exception]] = {}
_combined_lock = threading.Lock()


def _raised(modeled: type[Exception], problem: type[AwsProblem]) -> type[Exception]:
    """botocore's class for the code (a ClientError) with ``problem`` mixed in; one class
    per pair, so that equal errors are of one type."""
    with _combined_lock:
        found = _combined.get((modeled, problem))
        if found is None:
            found = type(modeled.__name__, (modeled, problem), {"__module__": __name__})
            _combined[(modeled, problem)] = found
        return found


class _TypedErrors:
    """botocore's after-call hook (``Aws.client``): for an error answer of a known meaning,
    raise what botocore would raise next, typed. botocore raises the answer's error right
    after this event (``BaseClient._make_api_call``), after its retries, and its waiters
    catch ``ClientError``, which the typed error still is."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __call__(
        self, http_response: Any, parsed: dict[str, Any], model: Any, context: Any, **_: Any
    ) -> None:
        if http_response.status_code < 300:
            return
        error = parsed.get("Error", {})
        code = str(context.get("error_code_override") or error.get("Code") or "")
        problem = classify(
            str(model.service_model.service_name),
            str(model.name),
            code,
            str(error.get("Message", "")),
        )
        if problem is not None:
            modeled = self.client.exceptions.from_code(code)
            raise _raised(modeled, problem)(parsed, str(model.name))


def typed_errors(client: Any) -> Any:
    """Make ``client`` raise the typed errors; returns it."""
    client.meta.events.register("after-call", _TypedErrors(client))
    return client
