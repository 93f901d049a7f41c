"""`fmctl validate` as users run it: located messages, exit codes, JSON, --show-defaults."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from provisioner.spec import defaults
from tests.cli.helpers import ROOT, fmctl
from tests.conftest import EXAMPLES

BROKEN = ROOT / "tests/data/demo-broken.yaml"
HEAD = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<level>error|warning): "
    r"(?P<path>[^:]+): (?P<msg>.*)$",
    re.M,
)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_examples_are_valid(example: Path) -> None:
    result = fmctl("validate", "-f", str(example))
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    assert result.stderr == ""


def test_there_are_examples_for_both_schedulers() -> None:
    schedulers = {yaml.safe_load(p.read_text())["scheduler"] for p in EXAMPLES}
    assert schedulers == {"slurm", "kubernetes"} and len(EXAMPLES) >= 3


def test_located_errors_point_at_the_offending_text() -> None:
    result = fmctl("validate", "-f", str(BROKEN))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = BROKEN.read_text().splitlines()
    found = list(HEAD.finditer(result.stderr))
    assert len(found) == 8  # 6 errors and 2 warnings, all at once
    expected = {  # path -> the text the column must point at
        "compute.gpuPools[0].instanceType": "p5.48xlarg",
        "compute.gpuPools[0].capacity.reservationId": "cr-12345",
        "storage.fsxLustre.capacityGiB": "4000",
        "storage.fsxLustre.throughputPerTiB": "300",
        "storage.fsxLustre.s3.exportPath": "s3://my-datasets/checkpoints",
        "kubernetes.version": "1.30",
        "network.sshCidr": "0.0.0.0/0",
        "compute.gpuPools[0].placementGroup": "true",
    }
    for match in found:
        line, col = int(match["line"]), int(match["col"])
        assert match["file"] == str(BROKEN)
        assert lines[line - 1][col - 1 :].startswith(expected[match["path"]]), match.group(0)
    # Each problem shows its source line, a caret under the column, and a hint.
    block = result.stderr.split("\n\n")[1]
    source, caret, hint = block.splitlines()[1:4]
    assert source.endswith(lines[12]) and "p5.48xlarg" in source
    assert caret.index("^") == source.index("p5.48xlarg")
    assert caret.count("~") == len("p5.48xlarg") - 1
    assert hint == "hint: did you mean 'p5.48xlarge'?"
    assert result.stderr.rstrip().endswith("6 error(s), 2 warning(s)")


def test_json_output() -> None:
    result = fmctl("validate", "-f", str(BROKEN), "-o", "json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["valid"] is False
    first = data["problems"][0]
    assert set(first) == {"file", "line", "column", "level", "code", "path", "message", "hint"}
    assert {p["code"] for p in data["problems"]} >= {"instance-type", "fsx-capacity"}


def test_warnings_alone_exit_zero(tmp_path: Path) -> None:
    spec = yaml.safe_load(EXAMPLES[0].read_text())
    spec["network"]["sshCidr"] = "0.0.0.0/0"
    path = tmp_path / "warn.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = fmctl("validate", "-f", str(path))
    assert result.returncode == 0
    assert ": warning: network.sshCidr:" in result.stderr


def test_scheduler_override_and_show_defaults() -> None:
    example = ROOT / "examples/p5-slurm-capacity-block.yaml"
    result = fmctl("validate", "-f", str(example), "--scheduler", "kubernetes", "--show-defaults")
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert resolved["scheduler"] == "kubernetes"
    pool = resolved["compute"]["gpuPools"][0]
    assert pool["minCount"] == pool["count"] == 16
    assert pool["efa"] is True and pool["placementGroup"] is False
    assert resolved["kubernetes"]["version"] == defaults.KUBERNETES_VERSION == "1.35"
    assert resolved["compute"]["systemNodes"] == {"instanceType": "m7i.2xlarge", "count": 2}


def test_show_defaults_fills_derived_values(tmp_path: Path) -> None:
    path = tmp_path / "min.yaml"
    path.write_text(
        "apiVersion: fmctl.dev/v1alpha1\nkind: Cluster\n"
        "metadata: {name: tiny, region: us-west-2}\n"
        "network: {availabilityZone: us-west-2a}\n"
        "compute:\n  gpuPools: [{name: g, instanceType: g6e.xlarge, count: 1}]\n"
        "storage: {fsxLustre: {}}\n"
    )
    result = fmctl("validate", "-f", str(path), "--show-defaults", "-o", "json")
    assert result.returncode == 0, result.stdout
    spec = json.loads(result.stdout)["spec"]
    assert spec["network"]["vpcCidr"] == "10.0.0.0/16"
    assert spec["compute"]["gpuPools"][0]["efa"] is False  # g6e.xlarge has no EFA
    assert spec["compute"]["gpuPools"][0]["placementGroup"] is True
    assert spec["storage"]["fsxLustre"] == {
        "capacityGiB": 1200,
        "deploymentType": "PERSISTENT_2",
        "throughputPerTiB": 250,
        "mountPath": "/fsx",
        "deletionPolicy": "delete",
    }


def test_stdin() -> None:
    result = fmctl("validate", "-f", "-", stdin="- not a mapping\n")
    assert result.returncode == 1
    assert result.stderr.startswith("<stdin>:1:1: error: the spec must be a mapping")


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\x01\x02binary\xff\xfe",
        b"- a\n- b\n",
        b"a: [\n",
        b"\t- x\n",
        b"key: value\n" * 120_000,
    ],
)
def test_junk_gets_a_located_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "junk.yaml"
    path.write_bytes(content)
    result = fmctl("validate", "-f", str(path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert re.match(rf"{re.escape(str(path))}:\d+:\d+: error: ", result.stderr), result.stderr
