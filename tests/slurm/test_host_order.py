"""slurm/lib/host-order.py on its own: Slurm's hostlists, a tree walked from its root,
blocks in index order, hosts the topology does not name at the end."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "slurm/lib/host-order.py"

#: `scontrol show topology` of a tree in Slurm 24.11's format (as the stand-in's slurmctld
#: prints it, tests/slurm/test_standin_topology.py: every switch lists all the nodes below it).
TREE = "\n".join(
    [
        "SwitchName=nn-4a Level=0 LinkSpeed=1 Nodes=b-st-p6-[1,3]",
        "SwitchName=nn-4b Level=0 LinkSpeed=1 Nodes=b-st-p6-[2,4]",
        "SwitchName=nn-3 Level=1 LinkSpeed=1 Nodes=b-st-p6-[1-4] Switches=nn-4a,nn-4b",
        "SwitchName=nn-4c Level=0 LinkSpeed=1 Nodes=b-st-p6-05",
        "SwitchName=nn-3c Level=1 LinkSpeed=1 Nodes=b-st-p6-05 Switches=nn-4c",
        "SwitchName=fmctl-root Level=2 LinkSpeed=1 Nodes=b-st-p6-[1-4],b-st-p6-05 "
        "Switches=nn-3,nn-3c",
    ]
)
BLOCKS = "\n".join(
    [
        "BlockName=cb-0bbb BlockIndex=1 Nodes=gb-st-g-[10-11] BlockSize=2",
        "BlockName=cb-0aaa BlockIndex=0 Nodes=gb-st-g-[8-9] BlockSize=2",
    ]
)


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("host_order", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hostlists() -> None:
    expand = _script().expand
    assert expand("a-[1-3,5],b7") == ["a-1", "a-2", "a-3", "a-5", "b7"]
    assert expand("n[08-10]") == ["n08", "n09", "n10"]
    assert expand("r[1-2]-n[1-2]") == ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
    assert expand("solo") == ["solo"] and expand("") == []


def test_a_tree_is_walked_leaf_by_leaf() -> None:
    order = _script().host_order(TREE, "b-st-p6-[1-4],b-st-p6-05,stray-1")
    assert order == ["b-st-p6-1", "b-st-p6-3", "b-st-p6-2", "b-st-p6-4", "b-st-p6-05", "stray-1"]


def test_blocks_come_in_index_order() -> None:
    order = _script().host_order(BLOCKS, "gb-st-g-[8-11]")
    assert order == ["gb-st-g-8", "gb-st-g-9", "gb-st-g-10", "gb-st-g-11"]


def test_the_hostfile_repeats_each_host_per_task(tmp_path: Path) -> None:
    topology = tmp_path / "topology.txt"
    topology.write_text(TREE)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(topology), "b-st-p6-[1-2]", "--repeat", "2"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["b-st-p6-1", "b-st-p6-1", "b-st-p6-2", "b-st-p6-2"]
    bad = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr
