"""fmctl: GPU clusters for foundation-model training on AWS, from one spec.

The import package is ``provisioner``; the command is ``fmctl``. Importing this package
must stay cheap: heavy SDKs (boto3, kubernetes, pcluster) load only where they are used.
"""

__version__ = "0.1.0"
