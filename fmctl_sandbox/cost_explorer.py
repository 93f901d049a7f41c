"""Cost Explorer's cost allocation tags, which moto lacks (its GetCostAndUsage is moto's own:
no data unless a test queues some).

From botocore's Cost Explorer model (2017-10-25, JSON 1.1): ListCostAllocationTags (filters
``TagKeys``, ``Status`` Active|Inactive, ``Type`` AWSGenerated|UserDefined; each tag
``TagKey``, ``Type``, ``Status``) and UpdateCostAllocationTagsStatus
(``CostAllocationTagsStatus``: ``TagKey`` and ``Status`` each; ``Errors`` for those it could
not change). A user-defined tag is Inactive until someone activates it, and Cost Explorer
has no costs by it until then (the Billing User Guide, "Activating user-defined cost
allocation tags"): the sandbox lists every tag key asked for, Inactive unless activated
here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fmctl_sandbox import protocol as p
from fmctl_sandbox.protocol import Call

Answer = tuple[int, dict[str, str], bytes]
STATUSES = ("Active", "Inactive")


@dataclass
class CostTags:
    """Each account's activated tags: (account, key) -> status."""

    status: dict[tuple[str, str], str] = field(default_factory=dict)

    def handles(self, call: Call) -> bool:
        """True for the calls this shim answers."""
        return call.service == "ce" and call.action in (
            "ListCostAllocationTags",
            "UpdateCostAllocationTagsStatus",
        )

    def handle(self, call: Call) -> Answer:
        """Answer one of them."""
        if call.action == "UpdateCostAllocationTagsStatus":
            return self._update(call)
        return self._list(call)

    def _list(self, call: Call) -> Answer:
        params = call.params
        wanted_status = params.get("Status")
        kind = params.get("Type", "UserDefined")
        if wanted_status is not None and wanted_status not in STATUSES:
            return p.json_error(400, "ValidationException", f"Status {wanted_status!r}")
        keys = list(params.get("TagKeys") or [])
        keys += [k for (a, k) in self.status if a == call.account and k not in keys]
        tags = [
            {
                "TagKey": key,
                "Type": "UserDefined",
                "Status": self.status.get((call.account, key), "Inactive"),
            }
            for key in keys
        ]
        tags = [
            t
            for t in tags
            if (wanted_status is None or t["Status"] == wanted_status) and t["Type"] == kind
        ]
        return p.json_response({"CostAllocationTags": tags})

    def _update(self, call: Call) -> Answer:
        entries: list[dict[str, Any]] = list(call.params.get("CostAllocationTagsStatus") or [])
        if not entries:
            return p.json_error(400, "ValidationException", "CostAllocationTagsStatus is empty")
        errors = []
        for entry in entries:
            if entry.get("Status") not in STATUSES:
                errors.append(
                    {
                        "TagKey": entry.get("TagKey"),
                        "Code": "ValidationException",
                        "Message": f"Status {entry.get('Status')!r}",
                    }
                )
                continue
            self.status[(call.account, str(entry["TagKey"]))] = str(entry["Status"])
        return p.json_response({"Errors": errors})
