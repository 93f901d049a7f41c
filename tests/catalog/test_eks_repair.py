"""EKS node auto repair's overrides for health.repair (provisioner/catalog/eks_repair.py),
against the EKS User Guide's table of default actions and fmctl's fault table."""

from __future__ import annotations

import pytest

from provisioner.catalog.eks_repair import EKS_DEFAULT_ACTIONS, WAIT_MINUTES, overrides
from provisioner.catalog.faults import Action, rule


def _actions(repair: str) -> dict[str, str]:
    return {**EKS_DEFAULT_ACTIONS, **{o.reason: o.action for o in overrides(repair)}}


@pytest.mark.parametrize("repair", ["replace", "reboot"])
def test_application_class_xids_never_repair_a_node(repair: str) -> None:
    """EKS would reboot for XID 13, 31, 63, 94 and replace for 121: NVIDIA's catalog leaves
    them to the job (RESTART_APP, IGNORE), so fmctl says NoAction."""
    actions = _actions(repair)
    for code in (13, 31, 63, 94, 121):
        row = rule(f"xid:{code}")
        assert row is not None and row.action is Action.NONE
        assert actions[f"NvidiaXID{code}Error"] == "NoAction"


def test_replace_replaces_every_fault_eks_would_reboot_for() -> None:
    actions = _actions("replace")
    assert set(actions.values()) == {"Replace", "NoAction"}
    assert actions["NvidiaXID64Error"] == actions["NvidiaXID95Error"] == "Replace"


def test_reboot_reboots_what_nvidia_says_a_reset_or_restart_cures() -> None:
    actions = _actions("reboot")
    # RESTART_BM (79) and RESET_GPU (64, 95, 119, 120, 140): rebooted.
    for code in (64, 79, 95, 119, 120, 140):
        assert actions[f"NvidiaXID{code}Error"] == "Reboot", code
    # A double-bit error (48), NVLink (74): the hardware is suspect.
    assert actions["NvidiaXID48Error"] == actions["NvidiaXID74Error"] == "Replace"


def test_overrides_only_where_eks_differs_and_each_is_whole() -> None:
    for repair in ("replace", "reboot"):
        for o in overrides(repair):
            default = EKS_DEFAULT_ACTIONS.get(o.reason)
            assert default != o.action or o.wait_minutes != WAIT_MINUTES, o
            # The API reference: "If you use this, you must specify all the values."
            assert o.condition == "AcceleratedHardwareReady" and o.wait_minutes in (1, 10)
    # NVLink errors: EKS replaces after 10 minutes, as fmctl would: no override.
    assert "NvidiaNVLinkError" not in {o.reason for o in overrides("replace")}


def test_a_fault_that_happened_leaves_service_in_a_minute() -> None:
    """An Xid line or a double-bit error: one minute, not EKS's ten; the agent's fatal Xids
    the guide's table does not list get fmctl's action too."""
    waits = {o.reason: (o.wait_minutes, o.action) for o in overrides("replace")}
    assert waits["NvidiaXID79Error"] == (1, "Replace")
    assert waits["NvidiaDoubleBitError"] == (1, "Replace")
    assert waits["NvidiaXID13Error"] == (WAIT_MINUTES, "NoAction")
    assert waits["NvidiaXID109Error"] == (1, "Replace")  # the agent's, not in the table
