"""Amazon EKS's Kubernetes release calendar: when each minor version leaves standard support
(14 months after its EKS release) and extended support (12 months more, billed per cluster
hour at six times the standard rate: $0.60 instead of $0.10).

Source: "Understand the Kubernetes version lifecycle on EKS", Amazon EKS User Guide
(https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html, the release
calendar; endoflife.date/amazon-eks carries the same dates) and the EKS pricing page for the
rates. 1.36 is newer than the calendar fmctl recorded: in standard support, end dates not yet
recorded. A cluster left past the end of standard support under ``upgradePolicy: STANDARD``
is upgraded by AWS; past extended support under EXTENDED, likewise.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal

Support = Literal["standard", "extended", "ended"]


@dataclass(frozen=True)
class EksRelease:
    """One Kubernetes minor version on EKS and its support dates (None: not recorded yet)."""

    version: str
    released: date | None
    end_of_standard: date | None
    end_of_extended: date | None

    def billed(self, today: date, policy: str) -> Literal["standard", "extended"]:
        """The rate the control plane is billed at on ``today`` under
        ``upgradePolicy.supportType`` ``policy``: extended only under EXTENDED, while the
        version is in extended support; under STANDARD, AWS upgrades the cluster when
        standard support ends, so it stays on the standard rate."""
        extended = policy == "EXTENDED" and self.support(today) == "extended"
        return "extended" if extended else "standard"

    def support(self, today: date) -> Support:
        """Which support the version is in on ``today``."""
        if self.end_of_standard is None or today < self.end_of_standard:
            return "standard"
        if self.end_of_extended is None or today < self.end_of_extended:
            return "extended"
        return "ended"


CALENDAR: dict[str, EksRelease] = {
    r.version: r
    for r in (
        EksRelease("1.30", date(2024, 5, 23), date(2025, 7, 23), date(2026, 7, 23)),
        EksRelease("1.31", date(2024, 9, 26), date(2025, 11, 26), date(2026, 11, 26)),
        EksRelease("1.32", date(2025, 1, 23), date(2026, 3, 23), date(2027, 3, 23)),
        EksRelease("1.33", date(2025, 5, 29), date(2026, 7, 29), date(2027, 7, 29)),
        EksRelease("1.34", date(2025, 10, 2), date(2026, 12, 2), date(2027, 12, 2)),
        EksRelease("1.35", date(2026, 1, 27), date(2027, 3, 27), date(2028, 3, 27)),
        EksRelease("1.36", None, None, None),
    )
}
