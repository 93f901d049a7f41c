"""The health agent's fault table (provisioner/catalog/faults.py): every XID of NVIDIA's
catalog once, application-class XIDs never acted on, and the node's copy equal to it."""

from __future__ import annotations

from provisioner.catalog.faults import XID_BUCKETS, Action, as_tsv, fault_table, rule
from tests.conftest import ROOT


def test_every_xid_of_the_catalog_has_one_row() -> None:
    codes = [code for codes in XID_BUCKETS.values() for code in codes]
    assert sorted(codes) == list(range(1, 163))
    assert len({r.code for r in fault_table()}) == len(fault_table())


def test_application_xids_never_drain_and_hardware_ones_do() -> None:
    # NVIDIA's RESTART_APP / IGNORE / WORKFLOW_XID_45: the job's to handle (issue 33: 13, 31,
    # 43 and the like never drain a node).
    for code in (13, 31, 43, 45, 63, 94, 154):
        found = rule(f"xid:{code}")
        assert found is not None and found.action is Action.NONE, found
    assert (r := rule("xid:79")) is not None and (r.fault_class, r.action) == (
        "RESTART_BM",
        Action.REBOOT,
    )
    for code, bucket in (
        (48, "WORKFLOW_XID_48"),
        (74, "WORKFLOW_NVLINK_ERR"),
        (145, "WORKFLOW_NVLINK5_ERR"),
    ):
        found = rule(f"xid:{code}")
        assert found is not None and (found.fault_class, found.action) == (bucket, Action.REPLACE)
    assert (r := rule("xid:95")) is not None and r.action is Action.REBOOT  # uncontained ECC
    assert (r := rule("gpu-count")) is not None and r.action is Action.REPLACE
    assert rule("xid:999") is None


def test_the_nodes_copy_is_the_catalogs() -> None:
    """slurm/lib/faults.tsv is what the agent reads on the node: regenerate it with
    `python -m provisioner.catalog.faults > slurm/lib/faults.tsv`."""
    assert (ROOT / "slurm/lib/faults.tsv").read_text() == as_tsv()


def test_only_lost_work_is_requeued() -> None:
    """The jobs column: requeued only where NVIDIA's bucket says the GPU must be reset or the
    machine restarted, or a GPU is gone; a fault the job survives, or the job's own, lets
    it finish."""
    from provisioner.catalog.faults import Jobs

    for row in fault_table():
        lost = row.fault_class in ("RESET_GPU", "RESTART_BM", "RESTART_VM", "GPU_MISSING")
        assert (row.jobs is Jobs.REQUEUE) == lost, row
        if row.action is Action.NONE:
            assert row.jobs is Jobs.FINISH


def test_events_are_what_is_read_once() -> None:
    """The seen column: an XID (a kernel line, read once) and an EFA counter's rise are new
    each time they are found; every other row is a state the agents count when it appears."""
    from provisioner.catalog.faults import Seen

    for row in fault_table():
        read_once = row.code.startswith("xid:") or row.code == "efa-errors"
        assert (row.seen is Seen.EVENT) == read_once, row
    assert as_tsv().splitlines()[0].endswith("\tseen")
    assert "\ngpu-count\tGPU_MISSING\treplace\trequeue\tstate\n" in as_tsv()
