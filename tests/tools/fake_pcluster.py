#!/usr/bin/env python3
"""A stand-in for ParallelCluster's `pcluster` CLI: ParallelCluster's real JSON shapes and
status sequence (CREATE_IN_PROGRESS -> CREATE_COMPLETE or CREATE_FAILED with failures,
DELETE_IN_PROGRESS -> gone), and its exit codes, dry run's 1-on-success included.

State lives in the JSON file $FAKE_PCLUSTER_STATE. $FAKE_PCLUSTER_SCENARIO picks a behaviour:
ok (default), bootstrap-failure, invalid-config, update-needs-stop. $FAKE_PCLUSTER_STEPS is how many
describe-cluster calls a create or delete takes (default 2). Every call is appended to the
state's "calls" list so tests can see what fmctl ran.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

DRYRUN_OK = "Request would have succeeded, but DryRun flag is set."


def _load() -> tuple[Path, dict]:
    path = Path(os.environ["FAKE_PCLUSTER_STATE"])
    state = json.loads(path.read_text()) if path.exists() else {"clusters": {}, "calls": []}
    return path, state


def _out(data: dict, code: int) -> None:
    print(json.dumps(data, indent=2))
    sys.exit(code)


def _summary(name: str, region: str, status: str) -> dict:
    return {
        "clusterName": name,
        "region": region,
        "version": "3.16.1",
        "cloudformationStackStatus": status,
        "clusterStatus": status,
        "cloudformationStackArn": f"arn:aws:cloudformation:{region}:123456789012:stack/"
        f"{name}/0f1e2d3c",
        "scheduler": {"type": "slurm"},
    }


def _missing(name: str) -> dict:
    return {
        "message": f"Cluster '{name}' does not exist or belongs to an incompatible "
        "ParallelCluster major version."
    }


def _changes(old: str, new: str) -> list[dict]:
    """A changeSet in ParallelCluster's shape: one entry per changed setting, named by its
    YAML path as ParallelCluster names it (ConfigPatch.build_config_param_path: dotted keys,
    list entries by their Name, e.g. Scheduling.SlurmQueues[train].ComputeResources[c].MaxCount).
    """
    import yaml

    out: list[dict] = []

    def shown(value: object) -> str:
        return "-" if value is None else str(value)

    def walk(before: object, after: object, path: list[str]) -> None:
        if isinstance(before, dict) and isinstance(after, dict):
            for key in sorted(set(before) | set(after)):
                walk(before.get(key), after.get(key), [*path, key])
        elif (
            isinstance(before, list)
            and isinstance(after, list)
            and all(isinstance(i, dict) and "Name" in i for i in before + after)
        ):
            old_items = {i["Name"]: i for i in before}
            new_items = {i["Name"]: i for i in after}
            for item in sorted(set(old_items) | set(new_items)):
                walk(old_items.get(item), new_items.get(item), [*path[:-1], f"{path[-1]}[{item}]"])
        elif before != after:
            out.append(
                {
                    "parameter": ".".join(path),
                    "currentValue": shown(before),
                    "requestedValue": shown(after),
                }
            )

    walk(yaml.safe_load(old), yaml.safe_load(new), [])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="pcluster")
    parser.add_argument("command")
    parser.add_argument("--cluster-name")
    parser.add_argument("--cluster-configuration")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--dryrun", default="false")
    parser.add_argument("--rollback-on-failure", default="true")
    parser.add_argument("--suppress-validators", nargs="*", default=[])
    args = parser.parse_args()
    path, state = _load()
    state["calls"].append([args.command, args.cluster_name, args.dryrun])
    scenario = os.environ.get("FAKE_PCLUSTER_SCENARIO", "ok")
    steps = int(os.environ.get("FAKE_PCLUSTER_STEPS", "2"))
    clusters = state["clusters"]
    name = args.cluster_name or ""
    try:
        if args.command == "version":
            _out({"version": "3.16.1"}, 0)
        if args.command in ("create-cluster", "update-cluster"):
            text = Path(args.cluster_configuration).read_text()
            if re.search(r"<fmctl:[A-Za-z]", text):  # a value ParallelCluster would reject
                _out(
                    {
                        "message": "Invalid cluster configuration.",
                        "configurationValidationErrors": [
                            {
                                "level": "ERROR",
                                "type": "ConfigSchemaValidator",
                                "message": "[('HeadNode', {'Networking': {'SubnetId': "
                                "['String does not match expected pattern.']}})]",
                            }
                        ],
                    },
                    1,
                )
            if scenario == "invalid-config":
                _out(
                    {
                        "message": "Invalid cluster configuration.",
                        "configurationValidationErrors": [
                            {
                                "level": "ERROR",
                                "type": "EfaValidator",
                                "message": "Instance type 'p5.48xlarge' in queue 'train' does not "
                                "support EFA with placement group 'Enabled: false'.",
                            }
                        ],
                    },
                    1,
                )
        if args.command == "create-cluster":
            if args.dryrun == "true":
                _out(
                    {
                        "message": DRYRUN_OK,
                        "validationMessages": [
                            {
                                "level": "WARNING",
                                "type": "FsxArchitectureOsValidator",
                                "message": "FSx Lustre client is installed from the OS packages.",
                            }
                        ],
                    },
                    1,
                )
            if name in clusters:
                _out({"message": f"Cluster '{name}' already exists."}, 1)
            clusters[name] = {
                "status": "CREATE_IN_PROGRESS",
                "describes": 0,
                "config": Path(args.cluster_configuration).read_text(),
                "region": args.region,
            }
            _out(
                {
                    "cluster": _summary(name, args.region, "CREATE_IN_PROGRESS"),
                    "validationMessages": [],
                },
                0,
            )
        if args.command == "describe-cluster":
            cluster = clusters.get(name)
            if cluster is None:
                _out(_missing(name), 1)
            cluster["describes"] += 1
            if cluster["describes"] >= steps and cluster["status"].endswith("_IN_PROGRESS"):
                if cluster["status"] == "DELETE_IN_PROGRESS":
                    del clusters[name]
                    _out(_missing(name), 1)
                failed = scenario == "bootstrap-failure"
                verb = cluster["status"].split("_", 1)[0]  # CREATE or UPDATE
                cluster["status"] = f"{verb}_FAILED" if failed else f"{verb}_COMPLETE"
            data = _summary(name, cluster["region"], cluster["status"])
            data.update(
                {
                    "computeFleetStatus": "RUNNING",
                    "tags": [],
                    "clusterConfiguration": {"url": "https://example.invalid/config"},
                    "headNode": {
                        "instanceId": "i-0123456789abcdef0",
                        "instanceType": "m7i.4xlarge",
                        "state": "running",
                        "privateIpAddress": "10.0.0.10",
                        "launchTime": "2026-11-29T10:00:00.000Z",
                    },
                }
            )
            if cluster["status"] == "CREATE_FAILED":
                data["failures"] = [
                    {
                        "failureCode": "HeadNodeBootstrapFailure",
                        "failureReason": "Failed to set up the head node.",
                    }
                ]
            _out(data, 0)
        if args.command == "delete-cluster":
            cluster = clusters.get(name)
            if cluster is None:
                _out(_missing(name), 1)
            cluster.update(status="DELETE_IN_PROGRESS", describes=0)
            _out({"cluster": _summary(name, cluster["region"], "DELETE_IN_PROGRESS")}, 0)
        if args.command == "update-cluster":
            cluster = clusters.get(name)
            if cluster is None:
                _out(_missing(name), 1)
            new_text = Path(args.cluster_configuration).read_text()
            change = _changes(cluster["config"], new_text)
            if not change:
                _out({"message": "No changes found in your cluster configuration."}, 1)
            if scenario == "update-needs-stop":
                _out(
                    {
                        "message": "Update failure",
                        "changeSet": change,
                        "updateValidationErrors": [
                            {
                                **c,
                                "message": "All compute nodes must be stopped. Stop the compute "
                                "fleet with the pcluster update-compute-fleet command",
                            }
                            for c in change
                        ],
                    },
                    1,
                )
            if args.dryrun == "true":
                _out({"message": DRYRUN_OK, "changeSet": change}, 1)
            cluster.update(status="UPDATE_IN_PROGRESS", describes=0, config=new_text)
            _out(
                {
                    "cluster": _summary(name, cluster["region"], "UPDATE_IN_PROGRESS"),
                    "changeSet": change,
                },
                0,
            )
        _out({"message": f"unknown command {args.command}"}, 2)
    finally:
        path.write_text(json.dumps(state))


if __name__ == "__main__":
    main()
