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
        "BlockSizes=1",  # no block smaller than the base (slurmctld's rule)
    ]


def test_usage_error_is_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main(["only-one-argument"]) == 2
    assert "Usage: topology.py" in capsys.readouterr().err


def test_four_layers_make_a_four_level_tree() -> None:
    """p6-b200 and p6-b300 have 4 network nodes per instance: every layer is a switch."""
    nodes = "\n".join(
        f"NodeName=b200-st-p6-{i} NodeAddr=10.0.1.{i} Partitions=b200" for i in (1, 2, 3)
    )
    doc = {
        "instances": [
            {"ip": "10.0.1.1", "networkNodes": ["nn-1", "nn-2", "nn-3", "nn-4a"]},
            {"ip": "10.0.1.2", "networkNodes": ["nn-1", "nn-2", "nn-3", "nn-4a"]},
            {"ip": "10.0.1.3", "networkNodes": ["nn-1", "nn-2", "nn-3b", "nn-4b"]},
        ]
    }
    body = [x for x in _script().render(doc, nodes, "tree").splitlines() if x[0] != "#"]
    assert body == [
        "SwitchName=nn-4a Nodes=b200-st-p6-1,b200-st-p6-2",
        "SwitchName=nn-4b Nodes=b200-st-p6-3",
        "SwitchName=nn-1 Switches=nn-2",
        "SwitchName=nn-2 Switches=nn-3,nn-3b",
        "SwitchName=nn-3 Switches=nn-4a",
        "SwitchName=nn-3b Switches=nn-4b",
        "SwitchName=fmctl-root Switches=nn-1",
    ]


def test_ultraservers_are_blocks_by_capacity_block_id() -> None:
    """GB200: EC2 gives an UltraServer's instances one capacityBlockId; that is the block,
    whatever their bottom network nodes, and BlockSizes is the smallest UltraServer's."""
    names = [f"gb-st-p6e-{i}" for i in range(1, 28)]
    nodes = "\n".join(
        f"NodeName={n} NodeAddr=10.0.2.{i} Partitions=gb" for i, n in enumerate(names)
    )
    doc = {
        "instances": [
            {
                "ip": f"10.0.2.{i}",
                "networkNodes": ["nn-1", "nn-2", f"nn-3{i % 2}"],
                "capacityBlockId": "cb-a" if i < 18 else "cb-b",
            }
            for i in range(len(names))
        ]
    }
    body = [x for x in _script().render(doc, nodes, "block").splitlines() if x[0] != "#"]
    assert body[0] == f"BlockName=cb-a Nodes={','.join(sorted(names[:18]))}"
    assert body[1] == f"BlockName=cb-b Nodes={','.join(sorted(names[18:]))}"
    assert body[2:] == ["BlockSizes=9"]
