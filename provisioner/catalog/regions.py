"""AWS commercial regions, for offline checks of ``metadata.region`` and the AZ name.

Availability zone names are the region plus one letter (``us-east-1a``). ``ZONES`` lists, per
region, every letter an account can see there: offline, a letter outside it is refused
(``us-west-2q``); whether this account has the zone is asked online (DescribeAvailabilityZones).
In the oldest regions AWS maps zones to letters per account (accounts made before November
2025), so the letters there are the union of what accounts see (us-west-1: two zones, named
a/b/c by account; ap-northeast-1: b only for older accounts).

Sources, read on ``ZONES_AS_OF``: the AWS Regions and Availability Zones guide, "AWS
Availability Zones" (the AZ IDs of each region; "each Region has at least three
Availability Zones") and "AZ IDs" (the independently mapped regions); the zones one account
sees in every region as moto records them (moto 5.2.5, moto/ec2/models/
availability_zones_and_regions.py), the letters of the independently mapped regions
completed from other accounts' (us-west-1: a/b in moto 5.2.5, b/c in moto's main branch;
ap-northeast-1: b for accounts made before its fourth zone was retired for new ones).
"""

from datetime import date

REGIONS: tuple[str, ...] = (
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ca-central-1",
    "ca-west-1",
    "mx-central-1",
    "sa-east-1",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-7",
    "ap-south-1",
    "ap-south-2",
    "ap-east-1",
    "me-south-1",
    "me-central-1",
    "il-central-1",
    "af-south-1",
)

#: When ``ZONES`` was read from its sources (a zone added since would be refused offline).
ZONES_AS_OF = date(2026, 12, 4)

#: Region -> the letters of its availability zones (see the module's docstring).
ZONES: dict[str, str] = {
    "us-east-1": "abcdef",
    "us-east-2": "abc",
    "us-west-1": "abc",
    "us-west-2": "abcd",
    "ca-central-1": "abd",
    "ca-west-1": "abc",
    "mx-central-1": "abc",
    "sa-east-1": "abc",
    "eu-west-1": "abc",
    "eu-west-2": "abc",
    "eu-west-3": "abc",
    "eu-central-1": "abc",
    "eu-central-2": "abc",
    "eu-north-1": "abc",
    "eu-south-1": "abc",
    "eu-south-2": "abc",
    "ap-northeast-1": "abcd",
    "ap-northeast-2": "abcd",
    "ap-northeast-3": "abc",
    "ap-southeast-1": "abc",
    "ap-southeast-2": "abc",
    "ap-southeast-3": "abc",
    "ap-southeast-4": "abc",
    "ap-southeast-5": "abc",
    "ap-southeast-7": "abc",
    "ap-south-1": "abc",
    "ap-south-2": "abc",
    "ap-east-1": "abc",
    "me-south-1": "abc",
    "me-central-1": "abc",
    "il-central-1": "abc",
    "af-south-1": "abc",
}


def zones_of(region: str) -> tuple[str, ...]:
    """The availability zones an account may have in ``region`` (empty: not a region of
    fmctl's table)."""
    return tuple(f"{region}{letter}" for letter in ZONES.get(region, ""))
