"""`-o json`: `up`, `down` and `gc` write JSON lines on stdout (each event, then a summary),
notices on stderr; errors are JSON on stdout too, with exit 1. The lines of a whole
lifecycle are checked on test_connect_logs's cluster (one cluster serves both)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.engine.harness import Sandbox, raw_leftovers


def _lines(stdout: str) -> list[dict[str, Any]]:
    """Every stdout line, parsed: a line that is not JSON fails here."""
    return [json.loads(line) for line in stdout.splitlines()]


def check_json_up(sandbox: Sandbox, spec: Path, name: str) -> None:
    """`up -o json` of a new cluster, then again: events, then a summary, on stdout only."""
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", "-o", "json")
    assert up.returncode == 0, up.stdout + up.stderr
    lines = _lines(up.stdout)
    events = [line["event"] for line in lines[:-1]]
    assert {e["state"] for e in events} >= {"creating", "ready", "waiting"}
    assert any(e.get("expected_s") for e in events if e["state"] == "waiting")
    summary = lines[-1]["summary"]
    assert summary["ok"] is True and summary["cluster"] == name
    assert summary["created"] > 30 and summary["failed"] == []
    assert "sandbox:" in up.stderr  # notices stay on stderr
    again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", "-o", "json")
    *seen, last = _lines(again.stdout)
    assert last["summary"]["created"] == 0 and last["summary"]["ok"] is True
    assert "creating" not in {line["event"]["state"] for line in seen}


def check_json_down(sandbox: Sandbox, name: str, region: str) -> None:
    """`down -o json`, then again once nothing is left."""
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", "-o", "json")
    assert down.returncode == 0, down.stdout + down.stderr
    lines = _lines(down.stdout)
    assert {line["event"]["state"] for line in lines[:-1]} >= {"deleting", "deleted"}
    summary = lines[-1]["summary"]
    assert summary["ok"] and summary["exists"] and summary["deleted"] > 30
    assert raw_leftovers(sandbox, name, region) == []
    gone = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", "-o", "json")
    assert _lines(gone.stdout) == [
        {
            "summary": {
                "cluster": name,
                "region": region,
                "ok": True,
                "exists": False,
                "deleted": 0,
                "local": [],
            }
        }
    ]


def test_errors_are_json_on_stdout(sandbox: Sandbox, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: fmctl.dev/v1alpha1\nkind: Cluster\nmetadata: {name: x}\n")
    done = sandbox.fmctl("up", "-f", str(bad), "--sandbox", "--yes", "-o", "json")
    assert done.returncode == 1
    (error,) = _lines(done.stdout)
    problems = error["error"]["problems"]
    assert problems and all(p["file"] == str(bad) and p["line"] >= 1 for p in problems)
    assert "error" in done.stderr  # and, for people, located on stderr

    asks = sandbox.fmctl("down", "e2e-json-x", "--region", "us-west-2", "--sandbox", "-o", "json")
    assert asks.returncode == 1
    assert _lines(asks.stdout) == [
        {"error": {"message": "`down -o json` does not ask before deleting", "hint": "pass --yes"}}
    ]
    gc = sandbox.fmctl("gc", "--sandbox", "-o", "json", "--older-than", "soon")
    assert gc.returncode == 1 and "is not a duration" in _lines(gc.stdout)[0]["error"]["message"]
