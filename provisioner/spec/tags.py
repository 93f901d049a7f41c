"""The tag that names a resource's cluster: part of the user contract (users select by it in
the console, in Cost Explorer's cost allocation tags and with kubectl), defined once for the
renderer, which writes it into configs, and the resource kinds, which find resources by it."""

from __future__ import annotations

OWNER_TAG = "fmctl.dev/cluster"
