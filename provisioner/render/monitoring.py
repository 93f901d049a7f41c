"""What both schedulers' monitoring ships: fmctl's alert rules and Grafana dashboards."""

from __future__ import annotations

from provisioner.shipped import shipped_dir


def alert_rules() -> str:
    """fmctl's Prometheus alert rules (the same for both schedulers)."""
    return (shipped_dir("templates") / "monitoring" / "alert-rules.yml").read_text()


def dashboards(scheduler: str) -> dict[str, str]:
    """Grafana dashboards shipped as JSON files, by file name: those of templates/dashboards/
    (both schedulers) and of its ``scheduler`` folder (Slurm's jobs and queue, Kubernetes'
    pods and nodes)."""
    folder = shipped_dir("templates") / "dashboards"
    paths = [*folder.glob("*.json"), *(folder / scheduler).glob("*.json")]
    return {p.name: p.read_text() for p in sorted(paths, key=lambda p: p.name)}
