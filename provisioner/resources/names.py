"""Names fmctl gives what it creates in namespaces AWS shares across an account (IAM) or
across every account (S3): deterministic, within AWS's limits, and distinct for distinct
clusters, regions and roles.

A name that fits is the readable one (``fmctl-CLUSTER-REGION-ROLE``). One that does not is
cut and ends with a short hash of the whole name, so two names that differ only in the part
cut off (the region, the role) stay two names. Cutting alone made, for a 40-character
cluster in a 14-character region, the EKS cluster role and the node role one role.

Limits: IAM role names 64 characters (IAM User Guide, "IAM object quotas": role name 64,
instance profile and policy names 128); S3 bucket names 3-63 characters of lowercase
letters, digits, dots and hyphens, starting and ending with a letter or digit (S3 User
Guide, "General purpose bucket naming rules").
"""

from __future__ import annotations

import hashlib

#: IAM's limit on role names (instance profiles share the role's name; their limit is 128).
ROLE_NAME_LIMIT = 64
#: S3's limit on bucket names.
BUCKET_NAME_LIMIT = 63
#: Hex digits of the hash a cut name ends with: 32 bits, so two names a cluster could
#: ask for collide with a chance of one in four billion.
HASH_DIGITS = 8


def bounded(full: str, limit: int) -> str:
    """``full`` when it fits in ``limit`` characters; else its head and ``-HASH`` of all of
    it, ``limit`` characters long (never ending in a hyphen before the hash)."""
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:HASH_DIGITS]
    head = full[: limit - HASH_DIGITS - 1].rstrip("-")
    return f"{head}-{digest}"


def head_of(full_prefix: str, limit: int) -> str:
    """What every name ``bounded(full_prefix + ..., limit)`` starts with: the prefix to list
    a cluster's names by (the ownership tag then says which are the cluster's)."""
    return full_prefix[: limit - HASH_DIGITS - 1]
