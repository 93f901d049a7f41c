"""fmctl's verify controller, pass by pass, against a recorded API: the requests it makes
for each state of a node and its Job (tests/engine/test_verify_gate.py runs it against the
sandbox's API, as its Deployment does)."""

from __future__ import annotations

import importlib.util
import json
import socket
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "templates/kubernetes/health-verify/verify_controller.py"
TAINTS = [
    {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
    {"key": "fmctl.dev/unverified", "value": "true", "effect": "NoSchedule"},
]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verify_controller", SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vc = _module()


class Recorded:
    """An API that answers from ``nodes`` and ``jobs`` and records what was asked."""

    def __init__(self, nodes: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
        self.nodes, self.jobs = nodes, jobs
        self.calls: list[tuple[str, str, Any]] = []
        self.refuse: dict[tuple[str, str], Exception] = {}

    def call(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        self.calls.append((method, path.split("?")[0], body))
        refused = self.refuse.get((method, path.split("?")[0]))
        if refused is not None:
            raise refused
        if method == "GET" and path == "/api/v1/nodes":
            return {"items": self.nodes}
        if method == "GET" and "/jobs" in path:
            return {"items": self.jobs}
        if method == "GET" and "/pods?" in path:
            return {
                "items": [{"metadata": {"name": "p"}, "spec": {"containers": [{"name": "gpu"}]}}]
            }
        if "/log" in path:
            return "ok gpus: 7 of 8\nFAIL gpus: 7 of 8 (gone)\n"
        return {}


def _node(name: str, uid: str, verdict: str = "", taints: Any = None) -> dict[str, Any]:
    notes = {"fmctl.dev/verify": verdict} if verdict else {}
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "resourceVersion": "41",
            "labels": {"fmctl.dev/pool": "gpu"},
            "annotations": notes,
        },
        "spec": {"taints": TAINTS if taints is None else taints},
    }


def _job(node: dict[str, Any], outcome: str | None) -> dict[str, Any]:
    status = {"conditions": [{"type": outcome, "status": "True"}]} if outcome else {}
    return {
        "metadata": {"name": vc.job_name(node), "annotations": {"fmctl.dev/node": "x"}},
        "status": status,
    }


TEMPLATE = {
    "metadata": {"name": vc.NAME_STANDIN},
    "spec": {"values": [vc.NODE_STANDIN], "other": "kept"},
}


def _controller(api: Recorded) -> Any:
    controller = vc.Controller(api, "fmctl-system", {"gpu": TEMPLATE})
    controller.said = []
    controller.say = controller.said.append
    return controller


def test_a_job_is_named_by_the_nodes_uid() -> None:
    """EC2 reuses private addresses, so a replacement can carry a gone node's name."""
    first, again = _node("ip-10-0-1-5", "uid-1"), _node("ip-10-0-1-5", "uid-2")
    assert vc.job_name(first) != vc.job_name(again)
    assert len(vc.job_name(first)) <= 63


def test_each_state_of_a_node() -> None:
    new = _node("new", "u1")
    passed = _node("passed", "u2")
    failed = _node("failed", "u3")
    held = _node("held", "u4", verdict="failed 2026-12-06T06:00:00Z: FAIL gpus: 7 of 8")
    done = _node("done", "u5", taints=TAINTS[:1])  # verified already: not looked at
    gone = {"metadata": {"name": "fmctl-verify-0", "annotations": {"fmctl.dev/node": "old"}}}
    api = Recorded(
        [new, passed, failed, held, done], [_job(passed, "Complete"), _job(failed, "Failed"), gone]
    )
    controller = _controller(api)
    controller.run_pass()
    jobs = "/apis/batch/v1/namespaces/fmctl-system/jobs"
    posts = [body for method, path, body in api.calls if method == "POST"]
    # The new node's Job: the template with its name and the node's, nothing else changed.
    assert posts == [
        {"metadata": {"name": vc.job_name(new)}, "spec": {"values": ["new"], "other": "kept"}}
    ]
    patches = {path: body for method, path, body in api.calls if method == "PATCH"}
    # A pass lifts the taint (the others stay), on the node as read (its resourceVersion).
    lift = patches["/api/v1/nodes/passed"]
    assert lift["spec"] == {"taints": TAINTS[:1]}
    assert lift["metadata"]["resourceVersion"] == "41"
    assert lift["metadata"]["annotations"]["fmctl.dev/verify"].startswith("passed ")
    # A failure records the FAIL lines and keeps the taint (no spec in the patch).
    keep = patches["/api/v1/nodes/failed"]
    assert "spec" not in keep
    assert keep["metadata"]["annotations"]["fmctl.dev/verify"].endswith(
        ": FAIL gpus: 7 of 8 (gone)"
    )
    assert "/api/v1/nodes/held" not in patches and "/api/v1/nodes/done" not in patches
    deleted = sorted(path for method, path, _ in api.calls if method == "DELETE")
    assert deleted == sorted(
        f"{jobs}/{name}" for name in (vc.job_name(passed), vc.job_name(failed), "fmctl-verify-0")
    )


def test_a_job_that_never_ran_says_why() -> None:
    """No FAIL line to quote (the pod never ran: its deadline passed while it waited for the
    node's devices): the verdict gives the Job controller's reason."""
    node = _node("stuck", "u1")
    job = _job(node, "Failed")
    job["status"]["conditions"][0]["reason"] = "DeadlineExceeded"
    api = Recorded([node], [job])
    api.call = _quiet_logs(api.call)  # type: ignore[method-assign]
    _controller(api).run_pass()
    (patch,) = [body for method, _, body in api.calls if method == "PATCH"]
    assert patch["metadata"]["annotations"]["fmctl.dev/verify"].endswith(
        ": its Job failed (DeadlineExceeded)"
    )


def _quiet_logs(call: Any) -> Any:
    """The recorded API, with logs that have no FAIL line (a pod that never ran)."""

    def quiet(method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        return "" if "/log" in path else call(method, path, body, ctype)

    return quiet


def test_a_node_changed_since_it_was_read_is_left_to_the_next_pass() -> None:
    """The API refuses the patch (Conflict: the node changed); the controller says so, goes
    on with the other nodes, and the pass itself does not fail."""
    first, second = _node("first", "u1"), _node("second", "u2")
    api = Recorded([first, second], [_job(first, "Complete"), _job(second, "Complete")])
    api.refuse[("PATCH", "/api/v1/nodes/first")] = vc.ApiError(409, "the object has been modified")
    controller = _controller(api)
    controller.run_pass()
    assert any(line.startswith("first: 409") for line in controller.said), controller.said
    assert ("PATCH", "/api/v1/nodes/second") in [(m, p) for m, p, _ in api.calls]
    # The refused node's Job stays for the next pass; the other's is deleted.
    deleted = [path for method, path, _ in api.calls if method == "DELETE"]
    assert deleted == [f"/apis/batch/v1/namespaces/fmctl-system/jobs/{vc.job_name(second)}"]


def test_it_ends_after_passes_fail_in_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its API gone for good (a sandbox stopped under it): it exits, for its kubelet to
    start it again."""
    account = tmp_path / "account"
    account.mkdir()
    (account / "token").write_text("t")
    monkeypatch.setattr(vc.time, "sleep", lambda _s: None)
    with socket.socket() as held:  # a port no one answers on: taken, then let go
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
    code = vc.main(
        [f"--server=https://127.0.0.1:{port}", f"--account={account}", f"--templates={tmp_path}"]
    )
    assert code == 1


def test_the_templates_are_the_pools_files(tmp_path: Path) -> None:
    (tmp_path / "gpu.json").write_text(json.dumps(TEMPLATE))
    (tmp_path / "notes.txt").write_text("not a template")
    assert vc.load_templates(tmp_path) == {"gpu": TEMPLATE}
