"""Load ParallelCluster configs through ParallelCluster's own schema; print JSON results.

Runs under the ParallelCluster virtualenv (.venv-pcluster), never fmctl's: ParallelCluster
pins old dependencies. Usage: python pcluster_schema.py CONFIG.yaml... ; prints one JSON
object {path: null | error text}. The schema check is offline but wants a region set.
"""

import json
import os
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

import yaml
from pcluster.schemas.cluster_schema import ClusterSchema

results = {}
for path in sys.argv[1:]:
    with open(path) as fh:
        data = yaml.safe_load(fh)
    try:
        ClusterSchema(cluster_name="fmctl-check").load(data)
        results[path] = None
    except Exception as exc:  # report every kind of rejection as data
        results[path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(results))
