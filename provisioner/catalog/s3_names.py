"""S3's naming rule for general purpose buckets, as a fact with its source."""

from __future__ import annotations

import re

#: 3-63 characters of lowercase letters, digits, dots and hyphens, starting and ending with
#: a letter or digit, no two dots in a row
#: (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def bucket_problem(bucket: str) -> str | None:
    """Why ``bucket`` is not a valid S3 bucket name, or None."""
    if not BUCKET_RE.match(bucket) or ".." in bucket:
        return (
            f"{bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, '.' and "
            "'-', starting and ending with a letter or digit)"
        )
    return None
