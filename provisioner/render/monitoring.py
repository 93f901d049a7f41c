"""What both schedulers' monitoring ships: fmctl's alert rules and Grafana dashboards."""

from __future__ import annotations

from provisioner.shipped import shipped_dir
from provisioner.spec.defaults import IDLE_ALERT_AFTER

#: GpuNodeIdle's wait as the rules file writes it: its `for` and its summary (each rule of the
#: pair, Slurm's and Kubernetes', has both once).
IDLE_TEXTS = (f"for: {IDLE_ALERT_AFTER}", "idle for 30 minutes")


def alert_rules(idle_after: str = IDLE_ALERT_AFTER) -> str:
    """fmctl's Prometheus alert rules (the same for both schedulers), GpuNodeIdle waiting
    ``idle_after`` (cost.idle.after: a duration Prometheus reads as written)."""
    text = (shipped_dir("templates") / "monitoring" / "alert-rules.yml").read_text()
    for written in IDLE_TEXTS:
        # Only GpuNodeIdle waits 30m: a rules file that says it elsewhere fails here.
        assert text.count(written) == 2, f"alert-rules.yml: {written!r} is not GpuNodeIdle's"
    if idle_after == IDLE_ALERT_AFTER:
        return text
    for written in IDLE_TEXTS:
        text = text.replace(
            written, written.replace("30m", idle_after).replace("30 minutes", idle_after)
        )
    return text


def dashboards(scheduler: str) -> dict[str, str]:
    """Grafana dashboards shipped as JSON files, by file name: those of templates/dashboards/
    (both schedulers) and of its ``scheduler`` folder (Slurm's jobs and queue, Kubernetes'
    pods and nodes)."""
    folder = shipped_dir("templates") / "dashboards"
    paths = [*folder.glob("*.json"), *(folder / scheduler).glob("*.json")]
    return {p.name: p.read_text() for p in sorted(paths, key=lambda p: p.name)}
