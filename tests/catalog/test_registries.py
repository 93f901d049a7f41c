"""Image registries per region: every region fmctl accepts has a decided row in both tables,
and the rendered manifests pull from the region's own account."""

from __future__ import annotations

import pytest

from provisioner.catalog.regions import REGIONS
from provisioner.catalog.registries import (
    DLC_ACCOUNTS,
    DLC_DEFAULT_REGIONS,
    EKS_ADDON_ACCOUNTS,
    EKS_DEFAULT_REGIONS,
)
from provisioner.render.images import Images


def test_every_accepted_region_has_a_row() -> None:
    for region in REGIONS:
        assert (region in EKS_ADDON_ACCOUNTS) != (region in EKS_DEFAULT_REGIONS), region
        assert (region in DLC_ACCOUNTS) != (region in DLC_DEFAULT_REGIONS), region


@pytest.mark.parametrize(
    ("region", "eks", "dlc"),
    [
        ("us-east-1", "602401143452", "763104351884"),
        ("af-south-1", "877085696533", "626614931356"),
        ("ap-east-1", "800184023465", "871362719292"),
        ("ap-south-2", "900889452093", "772153158452"),
        ("ap-northeast-3", "602401143452", "364406365360"),
        ("cn-northwest-1", "961992271922", "727897471807"),
        ("us-gov-east-1", "151742754352", "446045086412"),
    ],
)
def test_images_come_from_the_regions_own_registry(region: str, eks: str, dlc: str) -> None:
    images = Images.for_region(region)
    suffix = ".com.cn" if region.startswith("cn-") else ".com"
    host = f"dkr.ecr.{region}.amazonaws{suffix}"
    assert images.efa_device_plugin.startswith(f"{eks}.{host}/eks/aws-efa-k8s-device-plugin:")
    assert images.pytorch.startswith(f"{dlc}.{host}/pytorch-training:")
