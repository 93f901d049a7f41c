"""fmctl's verify controller, pass by pass, against a recorded API: the requests it makes
for each state of a node and its Job, and when it replaces a node that failed
(tests/engine/test_verify_gate.py runs it against the sandbox's API and AWS, as its
Deployment does). Its Signature Version 4 against botocore's signer."""

from __future__ import annotations

import json
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.render.helpers import program

ROOT = Path(__file__).resolve().parents[2]
TAINTS = [
    {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
    {"key": "fmctl.dev/unverified", "value": "true", "effect": "NoSchedule"},
]


vc = program("verify_controller")


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
        if method == "PATCH" and "annotations" in body.get("metadata", {}):
            # The API keeps what was patched: the next pass reads it back.
            for node in self.nodes:
                if path == f"/api/v1/nodes/{node['metadata']['name']}":
                    node["metadata"].setdefault("annotations", {}).update(
                        body["metadata"]["annotations"]
                    )
        if method == "GET" and "/jobs" in path:
            return {"items": self.jobs}
        if method == "GET" and "/pods?" in path:
            return {
                "items": [{"metadata": {"name": "p"}, "spec": {"containers": [{"name": "gpu"}]}}]
            }
        if "/log" in path:
            return "ok gpus: 7 of 8\nFAIL gpus: 7 of 8 (gone)\n"
        return {}


def _node(
    name: str, uid: str, verdict: str = "", taints: Any = None, created: str = ""
) -> dict[str, Any]:
    notes = {"fmctl.dev/verify": verdict} if verdict else {}
    return {
        "spec": {
            "taints": TAINTS if taints is None else taints,
            "providerID": f"aws:///us-east-1a/i-{uid}",
        },
        "metadata": {
            "name": name,
            "uid": uid,
            "resourceVersion": "41",
            "labels": {"fmctl.dev/pool": "gpu"},
            "annotations": notes,
            "creationTimestamp": created or "2026-12-01T00:00:00Z",
        },
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


FAILED = "failed 2026-12-06T06:00:00Z: FAIL gpus: 7 of 8"


class Fleet:
    """Auto Scaling as the controller's role reaches it: records each termination, or
    refuses them all with ``refusal``."""

    def __init__(self, refusal: Exception | None = None) -> None:
        self.terminated: list[str] = []
        self.refusal = refusal

    def replace(self, instance: str) -> None:
        if self.refusal is not None:
            raise self.refusal
        self.terminated.append(instance)


def _repairing(api: Recorded, fleet: Fleet, budget: int = 1) -> Any:
    controller = _controller(api)
    controller.repairs = vc.Repairs(fleet, True, {"gpu": budget})
    return controller


def _notes(api: Recorded) -> dict[str, str]:
    """The repair annotation each node was given, by node."""
    return {
        path.rsplit("/", 1)[-1]: body["metadata"]["annotations"]["fmctl.dev/verify-repair"]
        for method, path, body in api.calls
        if method == "PATCH"
        and path.startswith("/api/v1/nodes/")
        and "fmctl.dev/verify-repair" in body["metadata"]["annotations"]
    }


def test_a_node_that_failed_is_replaced_within_the_budget() -> None:
    """Two nodes failed, a healthy peer passed, the budget is one: one is replaced (its
    instance terminated in its group, which launches another), the other held until the
    replacement has its verdict."""
    ok = _node("ok", "ok", taints=TAINTS[:1])
    bad, worse = _node("bad", "a1", FAILED), _node("worse", "a2", FAILED)
    api, fleet = Recorded([ok, bad, worse], []), Fleet()
    controller = _repairing(api, fleet)
    controller.run_pass()
    assert fleet.terminated == ["i-a1"]
    notes = _notes(api)
    assert notes["bad"].startswith("replacing ") and "i-a1 terminated" in notes["bad"]
    assert notes["worse"].startswith("held ") and "repair budget of pool gpu" in notes["worse"]
    # Its node gone and a new one joined: still in the budget until the new one's verdict.
    new = _node("new", "n1", created=vc.now())
    api.nodes, api.calls = [ok, worse, new], []
    controller.run_pass()
    assert fleet.terminated == ["i-a1"] and "worse" not in _notes(api)  # said once
    api.jobs = [_job(new, "Complete")]
    controller.run_pass()  # the replacement passes: its place in the budget is free
    api.nodes = [ok, worse, dict(new, spec={"taints": TAINTS[:1]})]
    api.jobs = []
    controller.run_pass()
    assert fleet.terminated == ["i-a1", "i-a2"]


def test_nothing_is_replaced_while_no_node_of_the_pool_has_passed() -> None:
    """Every node failed: the image, the gate or the pool is at fault, not the nodes; new
    nodes would fail the same way, so all are held, saying so."""
    nodes = [_node(f"n{i}", f"u{i}", FAILED) for i in range(3)]
    api, fleet = Recorded(nodes, []), Fleet()
    _repairing(api, fleet, budget=3).run_pass()
    assert fleet.terminated == []
    notes = _notes(api)
    assert len(notes) == 3 and all("no node of pool gpu has passed" in n for n in notes.values())


def test_held_when_the_block_ends_or_the_replacements_keep_failing() -> None:
    ok = _node("ok", "ok", taints=TAINTS[:1])
    ending = _node(
        "ending",
        "e1",
        FAILED,
        taints=[*TAINTS, {"key": "fmctl.dev/capacity-block-ending", "effect": "NoSchedule"}],
    )
    api, fleet = Recorded([ok, ending], []), Fleet()
    controller = _repairing(api, fleet)
    controller.run_pass()
    assert fleet.terminated == []
    assert "Capacity Block is ending" in _notes(api)["ending"]
    # Replacements that fail the gate in a row: the rest are held.
    controller.repairs.failed_in_a_row["gpu"] = vc.REPLACEMENTS_IN_A_ROW
    api.nodes, api.calls = [ok, _node("bad", "b1", FAILED)], []
    controller.run_pass()
    assert fleet.terminated == []
    assert "the last 3 replacements in pool gpu failed the gate too" in _notes(api)["bad"]


def test_a_refused_replacement_is_said_and_tried_again() -> None:
    """AWS refuses (the role lacks the permission): the node stays held with AWS's words,
    and the next pass tries again."""
    ok, bad = _node("ok", "ok", taints=TAINTS[:1]), _node("bad", "b1", FAILED)
    refusal = vc.AwsError("AccessDenied", "not authorized to perform TerminateInstance...")
    api, fleet = Recorded([ok, bad], []), Fleet(refusal)
    controller = _repairing(api, fleet)
    controller.run_pass()
    assert "replacing it failed: AccessDenied: not authorized" in _notes(api)["bad"]
    fleet.refusal = None
    controller.run_pass()
    assert fleet.terminated == ["i-b1"]


def test_an_instance_another_repair_ended_first_is_not_replaced_again() -> None:
    """EKS node auto repair (or a person) ended the instance before the controller's
    termination: Auto Scaling no longer has it (its ValidationError, as recorded in
    yaybu/touchdown#51). The node is noted as going, not held with an error; nothing is
    counted in the budget and nothing asked again."""
    bad = _faulty("bad", "b1", XID79)
    gone = vc.AwsError(
        "ValidationError",
        "Instance Id not found - No managed instance found for instance ID i-b1",
    )
    api, fleet = Faulty([_faulty("ok", "ok"), bad], []), Fleet(gone)
    controller = _controller(api)
    controller.templates = {}
    controller.repairs = vc.Repairs(fleet, False, {"gpu": 1})
    controller.run_pass()
    note = _notes(api)["bad"]
    assert note.startswith("replacing ") and "i-b1 had ended already" in note
    assert fleet.terminated == [] and controller.repairs.pending == {}
    api.calls = []
    fleet.refusal = AssertionError("asked again")
    controller.run_pass()
    assert "bad" not in _notes(api)


def test_with_repair_reboot_a_failed_node_is_only_held() -> None:
    ok, bad = _node("ok", "ok", taints=TAINTS[:1]), _node("bad", "b1", FAILED)
    api, fleet = Recorded([ok, bad], []), Fleet()
    controller = _controller(api)
    controller.repairs = vc.Repairs(fleet, False, {"gpu": 1})
    controller.run_pass()
    assert fleet.terminated == []
    assert "health.repair is not replace" in _notes(api)["bad"]


def test_its_signature_is_botocores() -> None:
    """The controller signs its Auto Scaling call with the standard library; AWS checks it
    as botocore computes it (the sandbox checks every request with botocore's signer)."""
    import aws_call
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    keys = aws_call.Keys("ASIAEXAMPLEKEY000000", "secret/key+1", "session-token", 0.0)
    url = "https://autoscaling.us-east-1.amazonaws.com/"
    body = b"Action=TerminateInstanceInAutoScalingGroup&InstanceId=i-1&Version=2011-01-01"
    at = datetime(2026, 12, 6, 9, 30, 0, tzinfo=UTC)
    headers = aws_call.signed_headers(keys, url, "us-east-1", "autoscaling", body, at)
    given = headers.pop("authorization")
    request = AWSRequest(method="POST", url=url, headers=headers, data=body)
    request.context["timestamp"] = at.strftime("%Y%m%dT%H%M%SZ")
    signer = SigV4Auth(
        Credentials(keys.access_key, keys.secret_key, keys.token), "autoscaling", "us-east-1"
    )
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    assert given.endswith(f"Signature={expected}"), (given, canonical)
    assert "x-amz-security-token" in given


def test_the_repair_settings_are_what_fmctl_rendered(tmp_path: Path) -> None:
    settings = tmp_path / "_settings.json"
    settings.write_text(json.dumps({"region": "us-west-2", "replace": True, "budgets": {"a": 2}}))
    pairs = {"a": {"gbps": 280.0, "bytes": 1 << 32, "why": "line rate"}}
    settings.write_text(
        json.dumps({"region": "us-west-2", "replace": True, "budgets": {"a": 2}, "pairs": pairs})
    )
    repairs, floors = vc.load_settings(settings)
    assert repairs.replace and repairs.budgets == {"a": 2} and floors == pairs
    assert repairs.aws.url == "https://autoscaling.us-west-2.amazonaws.com/"
    assert not vc.load_settings(None)[0].configured


PAIR_TEMPLATE = [
    {"kind": "ConfigMap", "metadata": {"name": vc.NAME_STANDIN}},
    {"kind": "Service", "metadata": {"name": vc.NAME_STANDIN}},
    {
        "kind": "Job",
        "metadata": {"name": vc.NAME_STANDIN, "annotations": {"fmctl.dev/node": vc.NODE_STANDIN}},
        "spec": {"values": [vc.NODE_STANDIN, vc.PEER_STANDIN]},
    },
]
FLOOR = {"gpu": {"gbps": 280.0, "bytes": 4294967296, "why": "70% of EFA's 400 GB/s"}}
HEALTHY = (ROOT / "tests/data/check/nccl-k8s-p5en-2nodes-healthy.txt").read_text()


class Pairs(Recorded):
    """The recorded API with pairs: the Jobs made by name (their outcome set by the test),
    the cluster's pods, and what the pairs' pods printed."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__(nodes, [])
        self.made: dict[str, dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.printed = HEALTHY

    def call(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        bare = path.split("?")[0]
        if method == "POST" and bare.endswith("/jobs") and "-pair" in body["metadata"]["name"]:
            self.calls.append((method, bare, body))
            self.made[body["metadata"]["name"]] = body
            return body
        if method == "GET" and "/jobs/" in bare:
            self.calls.append((method, bare, body))
            name = bare.rsplit("/", 1)[-1]
            if name not in self.made:
                raise vc.ApiError(404, "not found")
            return self.made[name]
        if method == "GET" and bare == "/api/v1/pods":
            return {"items": self.pods}
        if method == "GET" and "-pair" in path and "/pods?" in path:
            return {"items": [{"metadata": {"name": "rank0"}}]}
        if method == "GET" and bare.endswith("/rank0/log"):
            return self.printed
        if method == "GET" and "/jobs" in bare and "fmctl-verify-pair" in path:
            return {"items": list(self.made.values())}
        if method == "DELETE" and "-pair" in bare:
            self.calls.append((method, bare, body))
            self.made.pop(bare.rsplit("/", 1)[-1], None)
            return {}
        return super().call(method, path, body, ctype)

    def finish(self, outcome: str = "Complete") -> None:
        for job in self.made.values():
            job["status"] = {"conditions": [{"type": outcome, "status": "True"}]}


def _pairing(api: Pairs) -> Any:
    controller = _controller(api)
    controller.floors, controller.pairs = FLOOR, {"gpu": PAIR_TEMPLATE}
    return controller


PAIRING = "pairing 2026-12-06T06:00:00Z: its own checks passed"


def _note(api: Recorded, node: str, key: str) -> str:
    """The last value given to the node's annotation ``key``."""
    found = [
        body["metadata"]["annotations"][key]
        for method, path, body in api.calls
        if method == "PATCH"
        and path.endswith(f"/{node}")
        and key in body["metadata"]["annotations"]
    ]
    return str(found[-1]) if found else ""


def test_a_node_that_passed_its_own_checks_pairs_with_an_idle_verified_peer() -> None:
    """The node Job passed: the node is pairing (still tainted); the pair runs with an idle
    verified peer (not a busy one, not one still tainted) and, at or above the floor, the
    node passes with the figure said."""
    new = _node("new", "n1")
    busy = _node("busy", "b1", taints=TAINTS[:1])
    idle = _node("idle", "i1", taints=TAINTS[:1])
    other = _node("other", "o1")  # being verified itself: no peer
    api = Pairs([new, busy, idle, other])
    api.jobs = [_job(new, "Complete")]
    gpus = {"resources": {"requests": {"nvidia.com/gpu": "8"}}}
    api.pods = [
        {"spec": {"nodeName": "busy", "containers": [gpus]}, "status": {"phase": "Running"}}
    ]
    controller = _pairing(api)
    controller.run_pass()
    assert _note(api, "new", "fmctl.dev/verify").startswith("pairing ")
    api.jobs = []
    controller.run_pass()
    (made,) = api.made.values()
    assert made["spec"]["values"] == ["new", "idle"]
    assert made["metadata"]["annotations"]["fmctl.dev/peer"] == "idle"
    posted = [p for m, p, b in api.calls if m == "POST" and "-pair" in b["metadata"]["name"]]
    assert [p.rsplit("/", 1)[-1] for p in posted] == ["configmaps", "services", "jobs"]
    api.finish()
    controller.run_pass()
    verdict = _note(api, "new", "fmctl.dev/verify")
    assert (
        verdict.startswith("passed ") and "nccl-pair 352.27 GB/s with idle (floor 280)" in verdict
    )
    assert _note(api, "new", "fmctl.dev/verify-pair") == "idle=352.27"
    lift = [b for m, p, b in api.calls if m == "PATCH" and p.endswith("/new") and "spec" in b]
    assert lift and lift[-1]["spec"] == {"taints": TAINTS[:1]}
    assert api.made == {}  # its objects deleted


def test_slow_with_two_peers_fails_slow_with_one_waits_none_skips() -> None:
    slow = HEALTHY.replace("busbw_GBps=352.27", "busbw_GBps=120.50")
    peers = [_node("p1", "p1", taints=TAINTS[:1]), _node("p2", "p2", taints=TAINTS[:1])]
    node = _node("new", "n1", PAIRING)
    api = Pairs([node, *peers])
    api.printed = slow
    controller = _pairing(api)
    controller.run_pass()
    api.finish()
    controller.run_pass()  # slow with p1: a second peer next
    assert _note(api, "new", "fmctl.dev/verify-pair") == "p1=120.5"
    assert _note(api, "new", "fmctl.dev/verify") == ""
    controller.run_pass()
    (made,) = api.made.values()
    assert made["spec"]["values"] == ["new", "p2"]
    api.finish()
    controller.run_pass()  # slow with p2 too: the node, not the peers
    verdict = _note(api, "new", "fmctl.dev/verify")
    assert verdict.startswith("failed ") and (
        "FAIL nccl-pair 120.5 GB/s with p1, 120.5 GB/s with p2 < 280 GB/s" in verdict
    ), verdict

    # One slow pair and no other idle peer: it waits (tainted, no verdict).
    alone = _node("alone", "a1", PAIRING)
    api = Pairs([alone, _node("p1", "p1", taints=TAINTS[:1])])
    api.printed = slow
    controller = _pairing(api)
    for _ in range(3):
        controller.run_pass()
        api.finish()
    assert _note(api, "alone", "fmctl.dev/verify") == "" and api.made == {}

    # No idle verified peer at all (the first nodes of a pool): skipped, and said.
    first = _node("first", "f1", PAIRING)
    api = Pairs([first, _node("second", "s1", PAIRING)])
    _pairing(api).run_pass()
    assert "no idle verified peer, nccl-pair skipped" in _note(api, "first", "fmctl.dev/verify")


def test_a_pair_that_printed_nothing_counts_as_slow() -> None:
    """A pair whose pods failed (no figure): said as such, and a second peer decides."""
    api = Pairs([_node("new", "n1", PAIRING), _node("p1", "p1", taints=TAINTS[:1])])
    api.printed = "NCCL WARN NET/OFI Unable to register memory\n"
    controller = _pairing(api)
    controller.run_pass()
    api.finish("Failed")
    controller.run_pass()
    assert _note(api, "new", "fmctl.dev/verify-pair") == "p1=-"


def test_the_pair_templates_are_the_pools_pair_files(tmp_path: Path) -> None:
    (tmp_path / "gpu.json").write_text(json.dumps(TEMPLATE))
    (tmp_path / "gpu.pair.json").write_text(json.dumps(PAIR_TEMPLATE))
    assert vc.load_templates(tmp_path) == {"gpu": TEMPLATE}
    assert vc.load_templates(tmp_path, "pair") == {"gpu": PAIR_TEMPLATE}


def test_a_pair_that_never_ran_is_not_held_against_the_node() -> None:
    """Its pods never started (a peer kept busy) for PAIR_TIMEOUT_S: the pair is given up,
    marked as not run, and another peer is tried; one slow pair after it does not fail the
    node (a second figure decides)."""
    peers = [_node("p1", "p1", taints=TAINTS[:1]), _node("p2", "p2", taints=TAINTS[:1])]
    api = Pairs([_node("new", "n1", PAIRING), *peers])
    controller = _pairing(api)
    controller.run_pass()
    (job,) = api.made.values()
    job["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    controller.run_pass()
    assert _note(api, "new", "fmctl.dev/verify-pair") == "p1=x" and api.made == {}
    api.nodes[0]["metadata"]["annotations"]["fmctl.dev/verify-pair"] = "p1=x"
    api.printed = HEALTHY.replace("busbw_GBps=352.27", "busbw_GBps=100")
    controller.run_pass()
    (job,) = api.made.values()
    assert job["spec"]["values"] == ["new", "p2"]
    api.finish()
    controller.run_pass()
    assert _note(api, "new", "fmctl.dev/verify-pair") == "p1=x p2=100"
    assert _note(api, "new", "fmctl.dev/verify") == ""  # one slow figure: not yet failed


def test_a_pair_whose_peer_went_is_not_held_against_the_node() -> None:
    """The peer went while the pair ran (the autoscaler took it in, idle): no figure, and no
    evidence either way; with no other idle verified peer the pair is skipped and the node
    passes, rather than wait tainted for a peer that never comes (a tainted node is capacity
    the autoscaler counts as coming, and never scales in)."""
    peer = _node("p1", "p1", taints=TAINTS[:1])
    api = Pairs([_node("new", "n1", PAIRING), peer])
    api.printed = ""
    controller = _pairing(api)
    controller.run_pass()
    (job,) = api.made.values()
    assert job["spec"]["values"] == ["new", "p1"]
    api.finish("Failed")
    api.nodes.remove(peer)
    controller.run_pass()
    assert _note(api, "new", "fmctl.dev/verify-pair") == "p1=x" and api.made == {}
    api.nodes[0]["metadata"]["annotations"]["fmctl.dev/verify-pair"] = "p1=x"
    controller.run_pass()
    verdict = _note(api, "new", "fmctl.dev/verify")
    assert "no idle verified peer, nccl-pair skipped" in verdict, verdict


class Kept(Recorded):
    """The recorded API with the controller's ConfigMap of repair counts."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__(nodes, [])
        self.map: dict[str, Any] | None = None

    def call(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        if f"configmaps/{vc.REPAIRS_MAP}" in path:
            self.calls.append((method, path, body))
            if self.map is None:
                raise vc.ApiError(404, "not found")
            if method == "PATCH":
                self.map["data"].update(body["data"])
            return self.map
        if method == "POST" and path.endswith("/configmaps"):
            self.calls.append((method, path, body))
            self.map = body
            return body
        return super().call(method, path, body, ctype)


def test_the_budget_outlives_the_controller() -> None:
    """A controller started again (a new pod) takes up the replacements under way from its
    ConfigMap: the budget stays in use, and the second failed node stays held."""
    ok = _node("ok", "ok", taints=TAINTS[:1])
    bad, worse = _node("bad", "a1", FAILED), _node("worse", "a2", FAILED)
    api, fleet = Kept([ok, bad, worse]), Fleet()
    _repairing(api, fleet).run_pass()
    assert fleet.terminated == ["i-a1"]
    assert api.map is not None and api.map["metadata"]["name"] == "fmctl-verify-repairs"
    kept = json.loads(api.map["data"]["state"])
    assert list(kept["pending"]) == ["gpu"] and len(kept["pending"]["gpu"]) == 1
    # The controller restarts; the failed node's note is cleared so that it would be said
    # again: the new controller holds it for the budget, from what was kept.
    api.nodes = [ok, worse]
    worse["metadata"]["annotations"].pop("fmctl.dev/verify-repair")
    again = _repairing(api, fleet)
    again.run_pass()
    assert fleet.terminated == ["i-a1"]
    assert (
        "repair budget of pool gpu is in use"
        in worse["metadata"]["annotations"]["fmctl.dev/verify-repair"]
    )


def test_a_restarted_controller_frees_no_place_twice() -> None:
    """Without the gate every Ready node counts as joining, and a new controller sees them
    all anew: the replacement that freed its place before the restart must not free the
    place of one asked for after it (which would let the pool exceed its budget)."""
    fleet = Fleet()
    first = vc.Repairs(fleet, False, {"gpu": 1})
    first.pending = {"gpu": [time.time() - 60]}
    joined = _faulty("new", "n1")
    joined["metadata"]["creationTimestamp"] = vc.now()
    first.verdict(joined, ok=True)
    assert first.pending == {"gpu": []}
    later = time.time() - 1  # another replacement asked for, its node not joined yet
    first.pending["gpu"].append(later)
    again = vc.Repairs(fleet, False, {"gpu": 1})
    again.load(first.state())
    again.verdict(joined, ok=True)  # the same node, seen joining by the new controller
    assert again.pending == {"gpu": [later]}
    assert json.loads(again.state())["counted"] == ["n1"]


def test_fmctl_reads_what_the_controller_writes() -> None:
    """The names and shapes the controller and `fmctl health` share (the controller stands
    alone in its image, so it cannot import them)."""
    from provisioner.catalog.eks_repair import UNVERIFIED_TAINT
    from provisioner.check import health_gather

    assert vc.REPAIRS_MAP == health_gather.REPAIRS_MAP
    assert vc.REPAIR == health_gather.REPAIR_ANNOTATION
    assert vc.VERDICT == health_gather.VERDICT_ANNOTATION
    assert vc.TAINT == UNVERIFIED_TAINT
    repairs = vc.Repairs(None, True, {"gpu": 1})
    repairs.pending = {"gpu": [1.0, 2.0]}
    assert health_gather.replacements({"data": {"state": repairs.state()}}) == {"gpu": 2}


class Faulty(Recorded):
    """An API whose nodes keep the taints patched onto them, and whose pods are ``pods``
    (the eviction of one removes it)."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        super().__init__(nodes, [])
        self.pods = pods

    def call(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        if method == "GET" and path == "/api/v1/pods":
            self.calls.append((method, path, body))
            return {"items": self.pods}
        if method == "POST" and path.endswith("/eviction"):
            self.calls.append((method, path, body))
            self.pods = [p for p in self.pods if p["metadata"]["name"] != body["metadata"]["name"]]
            return {}
        answer = super().call(method, path, body, ctype)
        if method == "PATCH" and "spec" in (body or {}):
            for node in self.nodes:
                if path == f"/api/v1/nodes/{node['metadata']['name']}":
                    node["spec"]["taints"] = body["spec"]["taints"]
        return answer


def _faulty(name: str, uid: str, message: str = "") -> dict[str, Any]:
    """A node in service (no startup taint) whose agent reports ``message`` as its fault
    ("" : healthy)."""
    node = _node(name, uid, taints=TAINTS[:1])
    condition = {"type": "FmctlHealthy", "status": "False" if message else "True"}
    condition |= {"message": message} if message else {}
    node["status"] = {"conditions": [{"type": "Ready", "status": "True"}, condition]}
    return node


def _gpu_pod(name: str, node: str) -> dict[str, Any]:
    gpu = {"name": "train", "resources": {"requests": {"nvidia.com/gpu": "8"}}}
    return {
        "metadata": {"name": name, "namespace": "training"},
        "spec": {"nodeName": node, "containers": [gpu]},
        "status": {"phase": "Running"},
    }


XID79 = "fmctl-health: XID 79 RESTART_BM -> reboot; jobs: requeue"
ECC = "fmctl-health: XID 48 WORKFLOW_XID_48 -> replace; jobs: finish"


def test_an_agents_fault_takes_the_node_out_and_replaces_it_within_the_budget() -> None:
    """Two nodes faulty at once, a budget of one: the first is tainted out of service, its
    GPU pods evicted (Xid 79 has lost their work) and, idle, replaced; the second is held
    until the replacement has joined, then goes the same way (its jobs finish first: an
    Xid 48 leaves them be)."""
    ok = _faulty("ok", "ok")
    bad, worse = _faulty("bad", "b1", XID79), _faulty("worse", "w1", ECC)
    pods = [_gpu_pod("train-0", "bad"), _gpu_pod("train-1", "worse")]
    api, fleet = Faulty([ok, bad, worse], pods), Fleet()
    controller = _controller(api)
    controller.templates = {}  # no verify gate
    controller.repairs = vc.Repairs(fleet, False, {"gpu": 1})
    controller.run_pass()
    assert [t["key"] for t in bad["spec"]["taints"]][-1] == "fmctl.dev/unhealthy"
    assert ("POST", "/api/v1/namespaces/training/pods/train-0/eviction") in [
        c[:2] for c in api.calls
    ]
    notes = _notes(api)
    assert notes["bad"].startswith("draining ") and XID79 in notes["bad"]
    assert notes["worse"].startswith("held ") and "repair budget of pool gpu" in notes["worse"]
    assert fleet.terminated == []
    controller.run_pass()  # its pods gone: replaced
    assert fleet.terminated == ["i-b1"]
    assert _notes(api)["bad"].startswith("replacing ")
    controller.run_pass()  # still in the budget: the other waits
    assert fleet.terminated == ["i-b1"] and "unhealthy" not in str(worse["spec"]["taints"])
    new = _faulty("new", "n1")
    new["metadata"]["creationTimestamp"] = vc.now()
    api.nodes = [ok, worse, new]
    controller.run_pass()  # the replacement joined: the other is taken out, not evicted
    assert "fmctl.dev/unhealthy" in str(worse["spec"]["taints"])
    assert not any(c[1].endswith("train-1/eviction") for c in api.calls)
    assert fleet.terminated == ["i-b1"]
    api.pods = []  # its job ended
    controller.run_pass()
    assert fleet.terminated == ["i-b1", "i-w1"]


def test_an_agents_fault_without_aws_access_is_only_held() -> None:
    bad = _faulty("bad", "b1", XID79)
    api = Faulty([_faulty("ok", "ok"), bad], [])
    controller = _controller(api)
    controller.templates = {}
    controller.repairs = vc.Repairs(None, False, {"gpu": 1})
    controller.run_pass()
    assert "no AWS access configured" in _notes(api)["bad"]
    assert "unhealthy" not in str(bad["spec"]["taints"])


def test_a_node_still_listed_after_its_termination_is_not_replaced_twice() -> None:
    """The node whose instance was terminated is read again before its note (the API slow
    to drop it): no second termination, and one place in the budget, not two."""
    bad = _faulty("bad", "b1", ECC)
    api, fleet = Faulty([_faulty("ok", "ok"), bad], []), Fleet()
    controller = _controller(api)
    controller.templates = {}
    controller.repairs = vc.Repairs(fleet, False, {"gpu": 2})
    controller.run_pass()
    assert fleet.terminated == ["i-b1"]
    bad["metadata"]["annotations"].pop("fmctl.dev/verify-repair")  # as if not yet written
    controller.run_pass()
    assert fleet.terminated == ["i-b1"]
    assert controller.repairs.pending == {"gpu": [controller.repairs.pending["gpu"][0]]}
