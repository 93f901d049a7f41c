"""How `fmctl plan` shows a change to people: by the spec's setting, a text as the lines
that change (a launch template's user data, not its MIME header cut at 90 characters), the
fields of an object changed in the cluster one by one, the unchanged summed up."""

from __future__ import annotations

import io

from provisioner.cli.engine_cmds import field_lines, show_plan

USER_DATA = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="FMCTL"

--FMCTL
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash
echo 2048 > /proc/sys/vm/nr_hugepages
systemctl restart kubelet
--FMCTL--
"""


def test_a_script_change_is_its_changed_lines() -> None:
    after = USER_DATA.replace("echo 2048", "echo 5128")
    lines = field_lines(
        {"path": "data.UserData", "from": USER_DATA, "to": after, "how": "update", "reason": ""}
    )
    assert lines[0] == "data.UserData: 2 lines change"
    assert "  -echo 2048 > /proc/sys/vm/nr_hugepages" in lines
    assert "  +echo 5128 > /proc/sys/vm/nr_hugepages" in lines
    assert not any("MIME-Version" in line for line in lines)  # context is one line each side


def test_a_field_is_named_by_the_spec_setting_it_comes_from() -> None:
    lines = field_lines(
        {
            "path": "scaling.desired_size",
            "spec": "compute.gpuPools[0].count",
            "from": 2,
            "to": 4,
            "how": "update",
            "reason": "UpdateNodegroupConfig",
        }
    )
    assert lines == ["compute.gpuPools[0].count (scaling.desired_size): 2 -> 4"]


def test_an_object_changed_in_the_cluster_lists_its_fields() -> None:
    lines = field_lines(
        {
            "path": "objects.DaemonSet/monitoring/dcgm-exporter",
            "from": {
                "spec.template.spec.containers[dcgm].image": "mine:1",
                "metadata.labels.x": None,
            },
            "to": {
                "spec.template.spec.containers[dcgm].image": "nvcr.io/x:4",
                "metadata.labels.x": "y",
            },
            "how": "update",
            "reason": "changed in the cluster by kubectl: up applies fmctl's fields again",
            "drift": True,
        }
    )
    assert lines[0].startswith("objects.DaemonSet/monitoring/dcgm-exporter: changed in the cluster")
    assert lines[0].endswith("(drift)")
    assert "  spec.template.spec.containers[dcgm].image: mine:1 -> nvcr.io/x:4" in lines
    assert "  metadata.labels.x: null -> y" in lines


def test_unchanged_resources_are_one_line_unless_asked() -> None:
    data = {
        "cluster": "c1",
        "region": "us-east-1",
        "changes": [
            {"resource": "vpc", "action": "unchanged", "fields": [], "aws_id": "vpc-1"},
            {"resource": "vpc-given", "action": "use", "fields": [], "aws_id": "vpc-2"},
            {
                "resource": "nodegroup/gpu",
                "action": "update",
                "fields": [
                    {
                        "path": "scaling.desired_size",
                        "from": 2,
                        "to": 4,
                        "how": "update",
                        "reason": "",
                    }
                ],
                "reason": "",
            },
        ],
        "counts": {"unchanged": 1, "use": 1, "update": 1},
        "waves": [["nodegroup/gpu"]],
        "critical_path": ["nodegroup/gpu"],
        "critical_path_s": 60,
        "serial_s": 60,
    }
    short, full = io.StringIO(), io.StringIO()
    show_plan(data, short)
    show_plan(data, full, show_unchanged=True)
    assert "vpc-1" not in short.getvalue() and "nodegroup/gpu" in short.getvalue()
    assert "2 resources unchanged (1 of them named by the spec" in short.getvalue()
    assert "vpc-1" in full.getvalue() and "vpc-2" in full.getvalue()
    assert "resources unchanged" not in full.getvalue()
