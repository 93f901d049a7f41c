"""ParallelCluster's own answers to what fmctl's UltraServer rules decide; prints JSON.

Runs under the ParallelCluster virtualenv (.venv-pcluster). Usage: python pcluster_facts.py
CASES.json, where CASES.json is [[head_architecture, compute_type, compute_architecture],
...]. Prints {"blockSizes": ParallelCluster's allowed UltraServer Capacity Block sizes,
"refused": [true when InstanceArchitectureCompatibilityValidator fails the case, ...]}. The
validator is given the instance-type data as DescribeInstanceTypes shapes it
(ProcessorInfo.SupportedArchitectures), as ParallelCluster's config loader would.
"""

import json
import sys

# ParallelCluster's own import order (its validators and config import each other).
import pcluster.config.cluster_config  # noqa: F401
from pcluster.aws.aws_resources import InstanceTypeInfo
from pcluster.constants import ULTRASERVER_CAPACITY_BLOCK_ALLOWED_SIZE_DICT
from pcluster.validators.cluster_validators import InstanceArchitectureCompatibilityValidator

with open(sys.argv[1]) as fh:
    cases = json.load(fh)
refused = []
for head_arch, compute_type, compute_arch in cases:
    info = InstanceTypeInfo(
        {"InstanceType": compute_type, "ProcessorInfo": {"SupportedArchitectures": [compute_arch]}}
    )
    failures = InstanceArchitectureCompatibilityValidator().execute([info], head_arch)
    refused.append(bool(failures))
print(json.dumps({"blockSizes": ULTRASERVER_CAPACITY_BLOCK_ALLOWED_SIZE_DICT, "refused": refused}))
