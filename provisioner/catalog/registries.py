"""Which ECR account serves AWS's container images in each region.

EKS add-on images (the EFA device plugin among them) and the AWS Deep Learning Containers are
replicated to every region, but the opt-in regions hold them in accounts of their own: an
image address built with the us-east-1 account fails to pull there. One table per kind, with
a row for every region fmctl accepts (catalog/regions.py; tests check the coverage).

Sources:
- EKS: "View Amazon container image registries for Amazon EKS add-ons",
  https://docs.aws.amazon.com/eks/latest/userguide/add-ons-images.html (the same table is in
  awslabs/amazon-eks-ami's get-ecr-uri.sh).
- DLC: aws/deep-learning-containers available_images.md ("region availability") and
  aws/sagemaker-python-sdk src/sagemaker/image_uri_config/*.json, which agree.
"""

from __future__ import annotations

#: The regions that use the default accounts below for both kinds (listed, not assumed: a new
#: region gets a row on purpose).
_COMMON = (
    "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "sa-east-1",
    "eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1", "eu-north-1",
    "ap-northeast-1", "ap-northeast-2", "ap-southeast-1", "ap-southeast-2", "ap-south-1",
)  # fmt: skip
#: Regions whose EKS add-on images are in the default account (ap-northeast-3 among them).
EKS_DEFAULT_REGIONS = frozenset((*_COMMON, "ap-northeast-3"))
#: Regions whose Deep Learning Containers are in the default account.
DLC_DEFAULT_REGIONS = frozenset(_COMMON)

#: Where EKS add-on images live outside the opt-in regions.
EKS_DEFAULT_ACCOUNT = "602401143452"
EKS_ADDON_ACCOUNTS: dict[str, str] = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-east-2": "533267051163",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-west-1": "761377655185",
    "eu-central-2": "900612956339",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
}

#: Where the Deep Learning Containers live outside the regions listed here.
DLC_DEFAULT_ACCOUNT = "763104351884"
DLC_ACCOUNTS: dict[str, str] = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-3": "364406365360",
    "ap-south-2": "772153158452",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-west-1": "204538143572",
    "eu-central-2": "380420809688",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "mx-central-1": "637423239942",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "us-gov-east-1": "446045086412",
    "us-gov-west-1": "442386744353",
}


def ecr_host(account: str, region: str) -> str:
    """The registry host of ``account`` in ``region`` (China's ECR is under .com.cn)."""
    suffix = ".com.cn" if region.startswith("cn-") else ".com"
    return f"{account}.dkr.ecr.{region}.amazonaws{suffix}"


def eks_addon_registry(region: str) -> str:
    """The registry EKS add-on images are pulled from in ``region``."""
    return ecr_host(EKS_ADDON_ACCOUNTS.get(region, EKS_DEFAULT_ACCOUNT), region)


def dlc_registry(region: str) -> str:
    """The registry the AWS Deep Learning Containers are pulled from in ``region``."""
    return ecr_host(DLC_ACCOUNTS.get(region, DLC_DEFAULT_ACCOUNT), region)
