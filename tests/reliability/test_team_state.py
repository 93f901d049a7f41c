"""Team state: two machines (two FMCTL_HOMEs, one AWS: the same emulator) share a cluster's
state and leased lock in S3, the real `fmctl` as subprocesses.

- two concurrent `up`s: exactly one proceeds, the other refuses naming the holder;
- a holder SIGKILLed: `up --wait` waits out its lease, takes over, converges, no duplicate;
- a holder paused past its lease (SIGSTOP) and resumed after a takeover writes nothing;
- `gc` skips a locked cluster; `history` shows every run;
- a machine that knows nothing of the team state (no FMCTL_STATE) finds it from the
  cluster's own tag (fmctl.dev/state) and honours its lock: gc skips, down refuses;
- the region comes from the team state (a teammate's cluster, a first `up` cut short);
- `unlock` records the run it ends, and on the holder's host sees that its process is gone.
"""

from __future__ import annotations

import calendar
import json
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from provisioner.drivers.aws import READ_PREFIXES
from provisioner.graph.runner import DEFAULT_PARALLELISM
from provisioner.resources.tags import CREATED_TAG, EXPIRES_TAG, OWNER_TAG, STATE_TAG
from tests.engine.harness import (
    Sandbox,
    fmctl_calls,
    kill_after,
    owned,
    region_of,
    spec_file,
)
from tests.engine.test_lifecycle import P5EN_RESOURCES
from tests.reliability.campaign import duplicates, raw_leftovers

BUCKET = "acme-fmctl-state"
STATE = f"s3://{BUCKET}/team"
#: Short leases keep the test quick (the protocol is the same at 120 s); long enough that
#: a run starved of CPU by the suite's other worker still renews in time.
LEASE = "8"


@pytest.fixture(scope="module")
def team(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Machine A is the sandbox's own home; machines B and C other homes reaching the same
    emulator (their `sandbox/` is A's: every machine sees one AWS). A and B are configured
    for the team state (FMCTL_STATE); C is not (``_alone``)."""
    homes = {"a": sandbox.home}
    for key in ("b", "c"):
        homes[key] = tmp_path_factory.mktemp(f"machine-{key}")
        (homes[key] / "sandbox").symlink_to(sandbox.home / "sandbox")
    init = sandbox.fmctl("state", "init", STATE, "--sandbox", "--region", "us-east-1")
    assert init.returncode == 0, init.stdout + init.stderr
    return homes


def _env(home: Path) -> dict[str, str]:
    return {"FMCTL_HOME": str(home), "FMCTL_STATE": STATE, "FMCTL_LOCK_LEASE": LEASE}


def _run(sandbox: Sandbox, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return sandbox.fmctl(*args, "--sandbox", timeout=300, **_env(home))


def _alone(sandbox: Sandbox, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A run on a machine that was told nothing of the team state."""
    return sandbox.fmctl(*args, "--sandbox", timeout=300, FMCTL_HOME=str(home), FMCTL_STATE="")


def _spawn(sandbox: Sandbox, home: Path, *args: str, lease: str = LEASE) -> subprocess.Popen[str]:
    return sandbox.spawn(*args, "--sandbox", **{**_env(home), "FMCTL_LOCK_LEASE": lease})


def _drain(proc: subprocess.Popen[str], into: list[str]) -> threading.Thread:
    """Keep reading ``proc``'s output (a full pipe would stall it)."""

    def read() -> None:
        assert proc.stdout is not None
        into.extend(proc.stdout)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _history(sandbox: Sandbox, home: Path, name: str) -> list[dict[str, Any]]:
    shown = _run(sandbox, home, "history", name, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    entries: list[dict[str, Any]] = json.loads(shown.stdout)
    return entries


def _versions(sandbox: Sandbox, name: str) -> list[tuple[str, str]]:
    """Every version of every state object of ``name`` (key, version id)."""
    s3 = sandbox.aws("us-east-1").client("s3")
    found = s3.list_object_versions(Bucket=BUCKET, Prefix=f"team/{name}/")
    rows = found.get("Versions", []) + found.get("DeleteMarkers", [])
    return sorted((r["Key"], r["VersionId"]) for r in rows)


def _writes_since(sandbox: Sandbox, since: float) -> list[str]:
    """fmctl's calls that changed something (answered 2xx) since ``since``, by the request
    log: not the cluster's own programs' (its node agents report on their nodes whenever
    they look; B's cluster has them running by then)."""
    out = []
    for r in fmctl_calls(sandbox.requests()):
        if r["time"] < since or not 200 <= int(r.get("status") or 0) < 300:
            continue
        action = str(r["action"])
        if action.startswith(("GET ", "HEAD ")) or action.startswith(READ_PREFIXES):
            continue
        out.append(action)
    return out


def test_conditional_writes_hold_in_the_sandbox(sandbox: Sandbox, team: dict[str, Path]) -> None:
    """The lock rests on these: If-None-Match: * creates once; If-Match must match, on
    PutObject and DeleteObject; and of many racing creates exactly one wins."""
    s3 = sandbox.aws("us-east-1").client("s3")
    key = "team/probe/lock.json"
    first = s3.put_object(Bucket=BUCKET, Key=key, Body=b"a", IfNoneMatch="*")
    with pytest.raises(Exception) as again:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"b", IfNoneMatch="*")
    assert again.value.response["Error"]["Code"] == "PreconditionFailed"  # type: ignore[attr-defined]
    with pytest.raises(Exception) as stale:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"c", IfMatch='"0000"')
    assert stale.value.response["Error"]["Code"] == "PreconditionFailed"  # type: ignore[attr-defined]
    with pytest.raises(Exception) as wrong_delete:
        s3.delete_object(Bucket=BUCKET, Key=key, IfMatch='"0000"')
    assert wrong_delete.value.response["Error"]["Code"] == "PreconditionFailed"  # type: ignore[attr-defined]
    s3.delete_object(Bucket=BUCKET, Key=key, IfMatch=first["ETag"])

    def race(i: int) -> bool:
        try:
            s3.put_object(Bucket=BUCKET, Key=key, Body=str(i).encode(), IfNoneMatch="*")
            return True
        except Exception as exc:
            assert exc.response["Error"]["Code"] in (  # type: ignore[attr-defined]
                "PreconditionFailed",
                "ConditionalRequestConflict",
            )
            return False

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(race, range(16))) == 1
    s3.delete_object(Bucket=BUCKET, Key=key)


def test_state_bucket_is_private_versioned_and_encrypted(
    sandbox: Sandbox, team: dict[str, Path]
) -> None:
    s3 = sandbox.aws("us-east-1").client("s3")
    assert s3.get_bucket_versioning(Bucket=BUCKET)["Status"] == "Enabled"
    rule = s3.get_bucket_encryption(Bucket=BUCKET)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    block = s3.get_public_access_block(Bucket=BUCKET)["PublicAccessBlockConfiguration"]
    assert all(block.values()) and len(block) == 4
    policy = json.loads(s3.get_bucket_policy(Bucket=BUCKET)["Policy"])
    deny = policy["Statement"][0]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}
    }
    again = _run(sandbox, team["b"], "state", "init", STATE, "--region", "us-east-1")
    assert again.returncode == 0 and f"bucket {BUCKET} exists" in again.stdout


def test_two_concurrent_ups_one_proceeds(
    sandbox: Sandbox, team: dict[str, Path], tmp_path: Path
) -> None:
    name = "e2e-team-both"
    spec = spec_file(tmp_path, name)
    a = _spawn(sandbox, team["a"], "up", "-f", str(spec), "--yes")
    b = _spawn(sandbox, team["b"], "up", "-f", str(spec), "--yes")
    out = {"a": "", "b": ""}
    for key, proc in (("a", a), ("b", b)):
        stdout, _ = proc.communicate(timeout=300)
        out[key] = stdout
    codes = {"a": a.returncode, "b": b.returncode}
    assert sorted(codes.values()) == [0, 1], out
    winner, loser = ("a", "b") if codes["a"] == 0 else ("b", "a")
    pid = (a if winner == "a" else b).pid
    assert " creating" in out[winner]
    assert " creating" not in out[loser], "the refused run changed nothing"
    assert "is being changed by" in out[loser] and f"(pid {pid}, `fmctl up`" in out[loser]
    assert "--wait" in out[loser]
    region = region_of(spec)
    items = owned(sandbox, name, region)
    assert {logical for _, logical, _ in items} == P5EN_RESOURCES
    assert duplicates(items) == {}
    # The other machine sees the winner's run, and the applied spec is in S3.
    runs = _history(sandbox, team[loser], name)
    assert [(r["command"], r["result"], r["pid"]) for r in runs] == [("up", "ok", pid)]
    assert any(c.startswith("create vpc") for c in runs[0]["changes"])
    down = _run(sandbox, team[loser], "down", name, "--region", region, "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
    assert [r["command"] for r in _history(sandbox, team[winner], name)] == ["up", "down"]


def test_killed_holder_is_waited_out_and_taken_over(
    sandbox: Sandbox, team: dict[str, Path], tmp_path: Path
) -> None:
    name = "e2e-team-killed"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    # A's lease outlasts B's start, however loaded the machine: B first finds it live. At
    # 20 s, `make campaign` once started B 27 s after A's last renewal (load 46 on 2 cores).
    a = _spawn(sandbox, team["a"], "up", "-f", str(spec), "--yes", lease="40")
    kill_after(a, " creating", 3)
    assert a.returncode == -9
    refused = _run(sandbox, team["b"], "up", "-f", str(spec), "--yes")
    assert refused.returncode == 1
    assert f"(pid {a.pid}, `fmctl up`" in refused.stderr and "lease ends at" in refused.stderr
    waited = _run(sandbox, team["b"], "up", "-f", str(spec), "--yes", "--wait")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "took over the lock" in waited.stderr and f"pid {a.pid}" in waited.stderr
    items = owned(sandbox, name, region)
    assert {logical for _, logical, _ in items} == P5EN_RESOURCES
    assert duplicates(items) == {}
    runs = _history(sandbox, team["a"], name)
    assert runs[0]["pid"] == a.pid
    assert runs[0]["result"].startswith("interrupted (taken over by")
    assert runs[1]["result"] == "ok" and runs[1]["took_over"].startswith(runs[0]["run"])
    down = _run(sandbox, team["a"], "down", name, "--region", region, "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def _expire(sandbox: Sandbox, name: str, region: str) -> None:
    """Make the cluster's ttl look passed (gc takes the earliest expires-at tag)."""
    ec2 = sandbox.aws(region).client("ec2")
    vpc = ec2.describe_vpcs(Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": [name]}])["Vpcs"][0]
    tags = {t["Key"]: t["Value"] for t in vpc["Tags"]}
    assert calendar.timegm(time.strptime(tags[CREATED_TAG], "%Y-%m-%dT%H:%M:%SZ")) > 0
    past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    ec2.create_tags(Resources=[vpc["VpcId"]], Tags=[{"Key": EXPIRES_TAG, "Value": past}])


# The test took 197 s under the campaign's load with a 60 s lease; it waits out 120 now.
@pytest.mark.timeout(600)
def test_paused_holder_writes_nothing_after_a_takeover(
    sandbox: Sandbox, team: dict[str, Path], tmp_path: Path
) -> None:
    """Paused past its lease, A resumes after B took over: A starts no step and writes no
    state. What no lock can stop (AWS's APIs take no fencing token) is a call A had begun
    to send when it was paused, at most one per thread of its run (``DEFAULT_PARALLELISM``:
    each runs one step, a call at a time); pausing A just as its
    VPC is ready catches the internet gateway's create in flight often. Such a call may make
    a second resource of a logical id; the next `up` deletes it."""
    name = "e2e-team-paused"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    # A's lease outlasts the reads below however loaded the machine (gc and down from two
    # machines): they must find it live. 30 s was not enough under `make campaign`'s full
    # load (two gc runs, a down and their reads took longer), nor was 60 at a load average
    # of 43 (C's down found it ended 61 s before); B's `up --wait` waits it out.
    a = _spawn(sandbox, team["a"], "up", "-f", str(spec), "--yes", lease="120")
    lines: list[str] = []
    reader = _drain(a, lines)
    deadline = time.monotonic() + 120
    while not any("ready  vpc-" in line for line in lines):  # paused mid-run, a VPC made
        assert time.monotonic() < deadline and a.poll() is None, "".join(lines)
        time.sleep(0.02)
    os.kill(a.pid, signal.SIGSTOP)
    try:
        # While A holds its lease (paused, but the lease still runs): gc leaves it alone.
        _expire(sandbox, name, region)
        listed = _run(sandbox, team["b"], "gc", "--expired", "--region", region, "--yes")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert f"skip {name}: locked by" in listed.stderr and f"pid {a.pid}" in listed.stderr
        assert f"locked   {name}" in listed.stdout
        # Machine C, told nothing of the team state, reads it off the cluster's VPC.
        vpc = next(i for k, _, i in owned(sandbox, name, region) if k == "vpc")
        ec2 = sandbox.aws(region).client("ec2")
        tags = ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"][0]["Tags"]
        assert {"Key": STATE_TAG, "Value": STATE} in tags
        blind = _alone(sandbox, team["c"], "gc", "--expired", "--region", region, "--yes")
        assert blind.returncode == 0, blind.stdout + blind.stderr
        assert f"skip {name}: locked by" in blind.stderr and f"pid {a.pid}" in blind.stderr
        refused = _alone(sandbox, team["c"], "down", name, "--region", region, "--yes")
        assert refused.returncode == 1 and f"pid {a.pid}" in refused.stderr, refused.stderr
        mixed = sandbox.fmctl(
            "down",
            name,
            "--region",
            region,
            "--yes",
            "--sandbox",
            FMCTL_HOME=str(team["c"]),
            FMCTL_STATE=f"s3://{BUCKET}/elsewhere",
        )
        assert mixed.returncode == 1 and f"live in {STATE}" in mixed.stderr, mixed.stderr
        assert owned(sandbox, name, region), "gc deleted nothing of a locked cluster"
        taken = _run(sandbox, team["b"], "up", "-f", str(spec), "--yes", "--wait")
        assert taken.returncode == 0, taken.stdout + taken.stderr
        assert "took over the lock" in taken.stderr
        before = _versions(sandbox, name)
        resumed = time.time()
    finally:
        os.kill(a.pid, signal.SIGCONT)
    a.wait(timeout=120)
    reader.join(timeout=30)
    output = "".join(lines)
    assert a.returncode == 1, output
    assert "lease" in output
    # No state object changed after A resumed, but one: A's own event log (only A ever
    # writes it, nobody reads it as the cluster's state) may gain the one flush that A had
    # begun to send when it was paused. The fence is checked as each write is sent
    # (``Backend.guard``), but a request past that check and not yet on the wire cannot be
    # called back: the sandbox's server closes every connection (werkzeug 3), so each call
    # opens one, and on a loaded machine connect and TLS handshake take long enough to be
    # caught by the pause. Every other object, and every other run's, is as it was.
    after = _versions(sandbox, name)
    own = f"team/{name}/events/"
    gained = [v for v in after if v not in before]
    assert [v for v in before if v not in after] == [], "a state version disappeared"
    a_run = next(e["run"] for e in _history(sandbox, team["b"], name) if e["pid"] == a.pid)
    assert all(key.startswith(own) and key.endswith(f"-{a_run}.jsonl") for key, _ in gained), (
        "A wrote state after resuming",
        gained,
    )
    assert len(gained) <= 1, ("A wrote its event log more than once after resuming", gained)
    landed = _writes_since(sandbox, resumed)
    assert len(landed) <= DEFAULT_PARALLELISM, landed
    again = _run(sandbox, team["b"], "up", "-f", str(spec), "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    items = owned(sandbox, name, region)
    assert {logical for _, logical, _ in items} == P5EN_RESOURCES and duplicates(items) == {}
    runs = _history(sandbox, team["b"], name)
    assert [r["result"] for r in runs] == [
        "interrupted (taken over by " + runs[1]["run"] + ")",
        "ok",
        "ok",
    ]
    down = _run(sandbox, team["b"], "down", name, "--region", region, "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def test_unlock_ends_a_dead_run_and_the_region_comes_from_the_team(
    sandbox: Sandbox, team: dict[str, Path], tmp_path: Path
) -> None:
    """A first `up` killed once its first resource is made: its process is gone on this host, so
    `unlock` removes its lock without asking and the history says who ended it. B, with
    no local record of the cluster and no region given, finds the region in the team
    state (the run recorded it before its first change) to finish it, show it and tear it
    down. A live holder (paused) is only unlocked when asked (--force)."""
    name = "e2e-team-unlock"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    a = _spawn(sandbox, team["a"], "up", "-f", str(spec), "--yes", lease="60")
    kill_after(a, " ready ", 1)
    freed = _run(sandbox, team["b"], "unlock", name)
    assert freed.returncode == 0, freed.stdout + freed.stderr
    assert f"pid {a.pid}" in freed.stdout and "no longer exists here" in freed.stdout
    assert "lock removed" in freed.stdout
    free = _run(sandbox, team["b"], "unlock", name)
    assert free.returncode == 0 and "not locked" in free.stdout
    (run,) = _history(sandbox, team["b"], name)
    assert run["pid"] == a.pid and run["result"] == "unlocked", run
    assert run["ended_by"] and " on " in run["ended_by"] and run["finished"]
    # B has nothing of it locally, and no region is configured: the team state says it.
    assert not (team["b"] / "clusters" / name / "spec.yaml").exists()
    shown = _run(sandbox, team["b"], "status", name)
    assert shown.returncode == 0 and f"{name} in {region}" in shown.stdout, shown.stderr
    b = _spawn(sandbox, team["b"], "up", "-f", str(spec), "--yes")
    lines: list[str] = []
    reader = _drain(b, lines)
    deadline = time.monotonic() + 120
    while not any(" creating" in line for line in lines):
        assert time.monotonic() < deadline and b.poll() is None, "".join(lines)
        time.sleep(0.02)
    os.kill(b.pid, signal.SIGSTOP)
    try:
        asked = _run(sandbox, team["a"], "unlock", name)
        assert asked.returncode == 1 and f"pid {b.pid}" in asked.stdout
        assert "--force" in asked.stderr
        forced = _run(sandbox, team["a"], "unlock", name, "--force")
        assert forced.returncode == 0 and "lock removed" in forced.stdout
        time.sleep(float(LEASE) + 1)  # B's lease, by its own clock, is over when it wakes
    finally:
        os.kill(b.pid, signal.SIGCONT)
    b.wait(timeout=120)
    reader.join(timeout=30)
    assert b.returncode == 1, "".join(lines)
    again = _run(sandbox, team["b"], "up", "-f", str(spec), "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert [r["result"] for r in _history(sandbox, team["a"], name)] == [
        "unlocked",
        "unlocked",
        "ok",
    ]
    down = _run(sandbox, team["b"], "down", name, "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"down {name}" in down.stderr + down.stdout
    assert raw_leftovers(sandbox, name, region) == []


def test_push_moves_a_local_state_and_pull_brings_it_back(
    sandbox: Sandbox, team: dict[str, Path], tmp_path: Path
) -> None:
    name = "e2e-team-push"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    local = {"FMCTL_HOME": str(team["a"]), "FMCTL_STATE": ""}
    made = sandbox.fmctl("up", "-f", str(spec), "--yes", "--sandbox", timeout=300, **local)
    assert made.returncode == 0, made.stderr
    pushed = _run(sandbox, team["a"], "state", "push", name)
    assert pushed.returncode == 0, pushed.stderr
    assert "spec.yaml" in pushed.stdout and "history object(s)" in pushed.stdout
    assert "now say so (fmctl.dev/state)" in pushed.stdout
    # The history moved with it: B sees A's `up`.
    assert [r["command"] for r in _history(sandbox, team["b"], name)] == ["up"]
    # A `down` in the wrong region finds nothing, and keeps this machine's note of where
    # the state lives (and the kubeconfig entry): only the state knows where the cluster is.
    wrong = "us-east-2" if region != "us-east-2" else "us-west-1"
    missed = _alone(sandbox, team["a"], "down", name, "--region", wrong, "--yes")
    assert missed.returncode == 0, missed.stderr
    assert f"state lives in {STATE}" in missed.stdout, missed.stdout
    assert (team["a"] / "clusters" / name / "state-location").exists()
    # C, told nothing, plans against the team state: the resources say where it is.
    blind = _alone(sandbox, team["c"], "plan", "-f", str(spec), "--detailed-exitcode")
    assert blind.returncode == 0, blind.stdout + blind.stderr
    # Machine B, with only the bucket, sees the applied spec: its plan changes nothing.
    plan = _run(sandbox, team["b"], "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    twice = _run(sandbox, team["a"], "state", "push", name)
    assert twice.returncode == 1 and "no local state" in twice.stderr
    pulled = _run(sandbox, team["b"], "state", "pull", name)
    assert pulled.returncode == 0, pulled.stderr
    assert "fmctl.dev/state taken off" in pulled.stdout
    assert (team["b"] / "clusters" / name / "spec.yaml").read_text() == spec.read_text()
    down = _run(sandbox, team["b"], "down", name, "--region", region, "--yes")
    assert down.returncode == 0
    assert raw_leftovers(sandbox, name, region) == []
