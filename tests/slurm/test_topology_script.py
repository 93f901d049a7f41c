"""slurm/lib/topology.py on its own: both styles, addresses to names, unplaced nodes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

NODES = "\n".join(
    [
        "NodeName=train-st-p5-1 Arch=x86_64 CoresPerSocket=48 NodeAddr=10.0.0.1 Partitions=train",
        "NodeName=train-st-p5-2 Arch=x86_64 CoresPerSocket=48 NodeAddr=10.0.0.2 Partitions=train",
        "NodeName=train-st-p5-3 Arch=x86_64 CoresPerSocket=48 NodeAddr=10.0.0.3 Partitions=train",
        "NodeName=dev-dy-g6-1 Arch=x86_64 NodeAddr=dev-dy-g6-1 Partitions=dev,all",
    ]
)
DOC = {
    "readAt": "2026-11-29T00:00:00Z",
    "instances": [
        {"ip": "10.0.0.1", "networkNodes": ["nn-a", "nn-b", "nn-c"]},
        {"ip": "10.0.0.2", "networkNodes": ["nn-a", "nn-b", "nn-d"]},
        {"ip": "10.0.0.3", "networkNodes": ["nn-a", "nn-e", "nn-f"]},
        {"ip": "10.9.9.9", "networkNodes": ["nn-a", "nn-e", "nn-f"]},  # not a Slurm node
    ],
}


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("topology", ROOT / "slurm/lib/topology.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tree() -> None:
    lines = _script().render(DOC, NODES, "tree").splitlines()
    body = [line for line in lines if not line.startswith("#")]
    assert body == [
        "SwitchName=nn-c Nodes=train-st-p5-1",
        "SwitchName=nn-d Nodes=train-st-p5-2",
        "SwitchName=nn-f Nodes=train-st-p5-3",
        "SwitchName=nn-a Switches=nn-b,nn-e",
        "SwitchName=nn-b Switches=nn-c,nn-d",
        "SwitchName=nn-e Switches=nn-f",
        "SwitchName=unplaced-dev Nodes=dev-dy-g6-1",
        "SwitchName=fmctl-root Switches=nn-a,unplaced-dev",
    ]
    assert "3 nodes placed, 1 not (yet)" in lines[1]


def test_block() -> None:
    body = [
        line
        for line in _script().render(DOC, NODES, "block").splitlines()
        if not line.startswith("#")
    ]
    assert body == [
        "BlockName=nn-c Nodes=train-st-p5-1",
        "BlockName=nn-d Nodes=train-st-p5-2",
        "BlockName=nn-f Nodes=train-st-p5-3",
        "BlockName=unplaced-dev Nodes=dev-dy-g6-1",
    ]


def test_usage_error_is_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main(["only-one-argument"]) == 2
    assert "Usage: topology.py" in capsys.readouterr().err
