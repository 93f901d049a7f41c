"""Where a cluster's state lives: this machine's folder (the default) or an S3 bucket and
prefix a team shares (``s3://BUCKET/PREFIX``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from provisioner import FmctlError
from provisioner.catalog.s3_names import bucket_problem

#: The prefix when a URL names none.
DEFAULT_PREFIX = "fmctl"


class BadStateUrl(FmctlError, ValueError):
    """A state URL that names no usable bucket; the message says how to write one."""

    default_hint = "write it as s3://BUCKET/PREFIX"


@dataclass(frozen=True)
class StateLocation:
    """The local folder (``bucket`` None), or an S3 bucket and key prefix."""

    bucket: str | None = None
    prefix: str = DEFAULT_PREFIX

    @property
    def local(self) -> bool:
        """True for the local folder."""
        return self.bucket is None

    @property
    def url(self) -> str:
        """``s3://BUCKET/PREFIX``, or ``local``."""
        return "local" if self.bucket is None else f"s3://{self.bucket}/{self.prefix}"

    def key(self, cluster: str, name: str) -> str:
        """The S3 key of one of ``cluster``'s objects."""
        return f"{self.prefix}/{cluster}/{name}"


LOCAL = StateLocation()


def parse_state_url(text: str) -> StateLocation:
    """``s3://BUCKET[/PREFIX]`` or ``local``; raises BadStateUrl with what to write."""
    if text.strip() == "local":
        return LOCAL
    match = re.match(r"^s3://([^/]+)(?:/(.*))?$", text.strip())
    if not match:
        raise BadStateUrl(f"state location {text!r} is not s3://BUCKET/PREFIX or `local`")
    bucket, prefix = match.group(1), (match.group(2) or "").strip("/")
    problem = bucket_problem(bucket)
    if problem:
        raise BadStateUrl(problem)
    return StateLocation(bucket, prefix or DEFAULT_PREFIX)
