"""AWS access: one place that builds boto3 clients, and AWS errors made actionable.

boto3 is imported here (lazily, on first client) and nowhere else but other drivers.
Retries of throttling and 5xx are botocore's own ("adaptive" mode: exponential backoff with
client-side rate limiting; "standard", without the limiter, in the sandbox), not a loop of
ours. In the sandbox every client points at the
local emulator with the sandbox's own credentials (random per sandbox; the emulator accepts
no others) and instance metadata disabled, whatever the environment holds, so nothing can
reach real AWS.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

from provisioner import FmctlBug, FmctlError, __version__
from provisioner.drivers.aws_errors import RULES, Throttled, typed_errors

if TYPE_CHECKING:
    # boto3's published stubs (types-boto3, a dev dependency): each service's client typed, so
    # mypy checks every call's operation name, parameters and answer fields.
    import types_boto3_autoscaling
    import types_boto3_budgets
    import types_boto3_ce
    import types_boto3_cloudformation
    import types_boto3_ec2
    import types_boto3_eks
    import types_boto3_events
    import types_boto3_fsx
    import types_boto3_iam
    import types_boto3_kms
    import types_boto3_lambda
    import types_boto3_logs
    import types_boto3_pcs
    import types_boto3_pricing
    import types_boto3_resourcegroupstaggingapi
    import types_boto3_s3
    import types_boto3_scheduler
    import types_boto3_service_quotas
    import types_boto3_sns
    import types_boto3_ssm
    import types_boto3_sts

#: Operations that only read (what `plan` may call): by name prefix, for every service.
READ_PREFIXES = ("Describe", "List", "Get", "Head", "Lookup", "Search")
#: Reads whose names start otherwise (CloudWatch Logs' search of a group's events).
READ_OPERATIONS = frozenset({"FilterLogEvents"})


def is_read(operation: str) -> bool:
    """True for an API operation that only reads."""
    return operation.startswith(READ_PREFIXES) or operation in READ_OPERATIONS


class WriteRefused(FmctlBug):
    """A client made read-only (`plan`) was asked to change something."""


class AwsError(FmctlError):
    """An AWS failure, translated for a person: what happened and what to do; ``code``:
    AWS's error code, where it gave one."""

    def __init__(self, message: str, hint: str | None = None, code: str | None = None) -> None:
        super().__init__(message, hint)
        self.code = code


@dataclass
class Aws:
    """Clients for one region, against real AWS or the sandbox emulator."""

    region: str
    endpoint_url: str | None = None
    sandbox: bool = False
    #: CA bundle to verify the endpoint with (the sandbox's own certificate).
    ca_bundle: str | None = None
    #: The sandbox's key pair (access key id, secret): the only one its emulator accepts.
    credentials: tuple[str, str] | None = None
    max_attempts: int = 10
    #: Refuse every call that is not a read (``READ_PREFIXES``), before it is sent.
    read_only: bool = False
    #: Called before every attempt of a call that is not a read; raises to stop it unsent
    #: (a run whose lease on the cluster's lock is gone).
    fence: Callable[[], None] | None = None
    #: The product token added to every call's User-Agent: CloudTrail records it with the
    #: call (its ``userAgent`` field), so an account's owner can tell fmctl's calls apart.
    agent: str = f"fmctl/{__version__}"
    _clients: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _session: Any = field(default=None, repr=False)

    @property
    def retry_mode(self) -> Literal["standard", "adaptive"]:
        """botocore's retry mode: "adaptive" against AWS (exponential backoff, and a client
        that slows its own sending after throttling answers, to stay under an API's rate
        limit); "standard" against the sandbox (the same backoff and retried errors, without
        the rate limiter). The emulator has no rate limit: its throttling answers are faults a
        test injects in a share of calls, and the limiter, paced by AWS's clock while the
        sandbox runs at a fraction of it, spent most of a fault test's time waiting for its
        tokens."""
        return "standard" if self.sandbox else "adaptive"

    @overload
    def client(
        self, service: Literal["autoscaling"], retries: bool = True
    ) -> types_boto3_autoscaling.Client: ...
    @overload
    def client(
        self, service: Literal["budgets"], retries: bool = True
    ) -> types_boto3_budgets.Client: ...
    @overload
    def client(self, service: Literal["ce"], retries: bool = True) -> types_boto3_ce.Client: ...
    @overload
    def client(
        self, service: Literal["cloudformation"], retries: bool = True
    ) -> types_boto3_cloudformation.Client: ...
    @overload
    def client(self, service: Literal["ec2"], retries: bool = True) -> types_boto3_ec2.Client: ...
    @overload
    def client(self, service: Literal["eks"], retries: bool = True) -> types_boto3_eks.Client: ...
    @overload
    def client(
        self, service: Literal["events"], retries: bool = True
    ) -> types_boto3_events.Client: ...
    @overload
    def client(self, service: Literal["fsx"], retries: bool = True) -> types_boto3_fsx.Client: ...
    @overload
    def client(self, service: Literal["iam"], retries: bool = True) -> types_boto3_iam.Client: ...
    @overload
    def client(self, service: Literal["kms"], retries: bool = True) -> types_boto3_kms.Client: ...
    @overload
    def client(
        self, service: Literal["lambda"], retries: bool = True
    ) -> types_boto3_lambda.Client: ...
    @overload
    def client(self, service: Literal["logs"], retries: bool = True) -> types_boto3_logs.Client: ...
    @overload
    def client(self, service: Literal["pcs"], retries: bool = True) -> types_boto3_pcs.Client: ...
    @overload
    def client(
        self, service: Literal["pricing"], retries: bool = True
    ) -> types_boto3_pricing.Client: ...
    @overload
    def client(
        self, service: Literal["resourcegroupstaggingapi"], retries: bool = True
    ) -> types_boto3_resourcegroupstaggingapi.Client: ...
    @overload
    def client(self, service: Literal["s3"], retries: bool = True) -> types_boto3_s3.Client: ...
    @overload
    def client(
        self, service: Literal["scheduler"], retries: bool = True
    ) -> types_boto3_scheduler.Client: ...
    @overload
    def client(
        self, service: Literal["service-quotas"], retries: bool = True
    ) -> types_boto3_service_quotas.Client: ...
    @overload
    def client(self, service: Literal["sns"], retries: bool = True) -> types_boto3_sns.Client: ...
    @overload
    def client(self, service: Literal["ssm"], retries: bool = True) -> types_boto3_ssm.Client: ...
    @overload
    def client(self, service: Literal["sts"], retries: bool = True) -> types_boto3_sts.Client: ...
    def client(self, service: str, retries: bool = True) -> Any:
        """A boto3 client (thread-safe to share; created once per service).

        ``retries=False`` gives one that never retries by itself, for creates that take no
        client token: after a lost answer, fmctl must look for what the call made before it
        tries again (``drivers.ec2_base.create_or_adopt``).
        """
        key = service if retries else f"{service}/once"
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self._make(service, 1 if not retries else None)
            return self._clients[key]

    def _make(self, service: str, attempts: int | None = None) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            region_name=self.region,
            # total_max_attempts counts every attempt; botocore reads max_attempts as retries.
            retries={"mode": self.retry_mode, "total_max_attempts": attempts or self.max_attempts},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=32,
            user_agent_extra=self.agent,
        )
        if self._session is None:
            if self.sandbox:
                # Never the environment's credentials, profile or config files, never the
                # metadata service: a sandbox run cannot pick up a real account by accident.
                import botocore.session

                os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
                # Session variables without environment names: AWS_PROFILE, AWS_CONFIG_FILE
                # and AWS_SHARED_CREDENTIALS_FILE are not even read.
                isolated = botocore.session.Session(
                    session_vars={
                        "profile": (None, None, None, None),
                        "config_file": (None, None, os.devnull, None),
                        "credentials_file": (None, None, os.devnull, None),
                    }
                )
                key, secret = self._sandbox_credentials()
                self._session = boto3.session.Session(
                    botocore_session=isolated,
                    region_name=self.region,
                    aws_access_key_id=key,
                    aws_secret_access_key=secret,
                )
            else:
                self._session = boto3.session.Session(region_name=self.region)
            _share_loader(self._session._session)
        kwargs: dict[str, Any] = {"config": config}
        if self.endpoint_url:
            kwargs["endpoint_url"] = self.endpoint_url
        if self.ca_bundle:
            kwargs["verify"] = self.ca_bundle
        client = typed_errors(self._session.client(service, **kwargs))
        if self.read_only:
            client.meta.events.register("before-call", _refuse_writes)
        if self.fence is not None:
            client.meta.events.register("before-send", _Fenced(self.fence))
        return client

    def in_region(self, region: str) -> Aws:
        """Clients of the same kind (endpoint, credentials, read-only, fence) in another
        region: for the APIs that answer in a few regions only (the Price List)."""
        return Aws(
            region,
            endpoint_url=self.endpoint_url,
            sandbox=self.sandbox,
            ca_bundle=self.ca_bundle,
            credentials=self.credentials,
            max_attempts=self.max_attempts,
            read_only=self.read_only,
            fence=self.fence,
            agent=self.agent,
        )

    def _sandbox_credentials(self) -> tuple[str, str]:
        if self.credentials is None:
            raise AwsError("a sandbox client needs the sandbox's credentials")
        return self.credentials

    def child_env(self) -> dict[str, str]:
        """The environment for a subprocess that must reach the same AWS as these clients
        (ParallelCluster's `pcluster`): in the sandbox, the emulator with its certificate
        and credentials, and nothing of the caller's profile, config or metadata."""
        env = dict(os.environ)
        if self.sandbox:
            for key in [k for k in env if k.startswith("AWS_")]:
                del env[key]
            key, secret = self._sandbox_credentials()
            env.update(
                AWS_ACCESS_KEY_ID=key,
                AWS_SECRET_ACCESS_KEY=secret,
                AWS_CONFIG_FILE=os.devnull,
                AWS_SHARED_CREDENTIALS_FILE=os.devnull,
                AWS_EC2_METADATA_DISABLED="true",
            )
        if self.endpoint_url:
            env["AWS_ENDPOINT_URL"] = self.endpoint_url
        if self.ca_bundle:
            env["AWS_CA_BUNDLE"] = self.ca_bundle
        env["AWS_DEFAULT_REGION"] = self.region
        return env

    def account_id(self) -> str:
        """The account of the credentials in use."""
        return str(self.client("sts").get_caller_identity()["Account"])


#: The first session's botocore data loader, shared by every later one in this process.
_loader: Any = None
_loader_lock = threading.Lock()


def _share_loader(core: Any) -> None:
    """Give botocore session ``core`` the process's data loader, which caches what it
    parses: service models, endpoint rules and partitions are read once per process, not
    once per ``Aws`` (an `up` makes seven, for validation, state, plan and apply; parsing
    EC2's model alone is a tenth of a second each time). The loader's data is only read
    once parsed (one session's clients share it too). Registered after boto3's Session has
    added its own resource path to the session's first loader."""
    global _loader
    with _loader_lock:
        if _loader is None:
            _loader = core.get_component("data_loader")
        else:
            core.register_component("data_loader", _loader)


def _refuse_writes(model: Any, **_: Any) -> None:
    """botocore's before-call hook of a read-only client: reads pass, anything else stops
    here, unsent."""
    if not is_read(str(model.name)):
        raise WriteRefused(f"{model.name} is not a read, and this run only reads")


class _Fenced:
    """botocore's before-send hook (every attempt, retries too): reads pass; anything else
    is sent only if the fence lets it."""

    def __init__(self, fence: Callable[[], None]) -> None:
        self.fence = fence

    def __call__(self, event_name: str = "", **_: Any) -> None:
        if not is_read(event_name.rsplit(".", 1)[-1]):
            self.fence()


#: AWS's throttling codes, from the one table of codes (every service's, so by code alone).
THROTTLING = frozenset(r.code for r in RULES if r.problem is Throttled and r.service == "*")


def transient(exc: BaseException) -> bool:
    """True for failures a retry may cure: lost connections, timeouts, 5xx, throttling."""
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError

    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return True
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return bool(status >= 500 or error_code(exc) in THROTTLING)
    return False


def _is(exc: BaseException, name: str) -> bool:
    """``exc`` is botocore's exception ``name`` (or a subclass of it)."""
    return any(
        c.__name__ == name and c.__module__.startswith("botocore") for c in type(exc).__mro__
    )


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError, or None for anything else."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code else None
    return None


_HINTS = {
    "InsufficientInstanceCapacity": "EC2 has no free capacity of this type in this AZ now: try "
    "another AZ, a Capacity Block or an ODCR, or retry later",
    "VcpuLimitExceeded": "raise the quota 'Running On-Demand P instances' (L-417A185B) in "
    "Service Quotas for this region",
    "ServiceQuotaExceededException": "raise the named quota in Service Quotas",
    "UnauthorizedOperation": "the credentials lack a permission; the message names the action",
    "AccessDenied": "the credentials lack a permission; the message names the action",
    "AccessDeniedException": "the credentials lack a permission; the message names the action",
    "ExpiredToken": "refresh your credentials (e.g. `aws sso login`)",
    "RequestExpired": "refresh your credentials, and check the machine's clock",
    "DependencyViolation": "something else still uses this resource; `fmctl down` retries "
    "once its dependents are gone",
    "InvalidCapacityReservationId.NotFound": "check the reservation id and region in the spec",
}


#: botocore's configuration errors (its exceptions module), by class name: met before any
#: call reaches AWS, each with what to do about it.
_SETUP_HINTS = {
    "ProfileNotFound": "`aws configure list-profiles` lists the profiles; --profile or "
    "AWS_PROFILE names one",
    "NoCredentialsError": "configure credentials (`aws configure`, `aws sso login`, or "
    "AWS_PROFILE); `--sandbox` runs against the local emulator and needs none",
    "PartialCredentialsError": "set both the access key id and the secret (or use a profile)",
    "UnauthorizedSSOTokenError": "run `aws sso login` for the profile",
    "SSOTokenLoadError": "run `aws sso login` for the profile",
    "TokenRetrievalError": "run `aws sso login` for the profile",
    "CredentialRetrievalError": "check the profile's credential_process or source",
    "NoRegionError": "pass --region, or set AWS_REGION",
}


#: botocore's errors for a request that never got an answer (its exceptions module: under
#: ConnectionError or HTTPClientError), after the retries: the network, not fmctl or AWS.
_NETWORK_HINT = (
    "the endpoint did not answer: check the network, a proxy (HTTPS_PROXY, NO_PROXY) and "
    "AWS_ENDPOINT_URL if set, then run the command again (up and down resume where they "
    "stopped)"
)


def translate(exc: BaseException, doing: str) -> AwsError:
    """An AwsError saying what fmctl was doing, what AWS said, and what to try."""
    if isinstance(exc, AwsError):  # already says what to do: keep its hint
        return AwsError(f"{doing}: {exc}", exc.hint, exc.code)
    setup = next((n for n in _SETUP_HINTS if _is(exc, n)), None)
    if setup is not None:
        return AwsError(f"{doing}: {exc}", _SETUP_HINTS[setup], setup)
    if _is(exc, "ConnectionError") or _is(exc, "HTTPClientError"):
        return AwsError(f"{doing}: {exc}", _NETWORK_HINT, type(exc).__name__)
    code = error_code(exc)
    if code is None:
        return AwsError(f"{doing}: {exc}", code=None)
    message = getattr(exc, "response", {}).get("Error", {}).get("Message", str(exc))
    return AwsError(f"{doing}: {code}: {message}", _HINTS.get(code), code)
