"""`fmctl check` on EKS at 1 and 1,024 nodes: is the per-node work fanned out? The gather
(provisioner.check.kube_gather.gather, the code `fmctl check NAME` runs) against a stand-in
Kubernetes API that answers each call after a round trip's latency and finishes each node's
Job a fixed time after it was created, as a cluster whose nodes work side by side does. The
sandbox is not used: its kubelet runs at most 16 pods at once on this 2-core machine, and
1,024 nodes' pods through it would measure the emulator, not fmctl.

The node work is set to 1/20 of what the check expects of a node (12 s instead of
kube_gather's EXPECTED_SECONDS, 240 s; DCGM's level-2 diagnostic is "approximately two
minutes" of it, dcgmi-diag(1)) to keep the benchmark short; that makes fmctl's own
per-node cost weigh 20 times more in the ratio than on a cluster. Not a test.

    python benchmarks/check_scale.py     # part of make bench
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from table import Row

ROOT = Path(__file__).resolve().parent.parent
#: One Kubernetes API round trip from a laptop to EKS (tens of milliseconds).
LATENCY = 0.02
#: The node check's duration here (a twentieth of the real one: see the docstring).
SCALE = 0.05
SIZES = (1, 1024)


class LaggedApi:
    """Kubernetes' API shape (apply, get, list, logs, delete) for the check's objects, every
    call taking ``LATENCY``; a Job (and its pod) is done ``work`` seconds after its apply."""

    def __init__(self, nodes: list[dict[str, Any]], work: float, logs: dict[str, str]) -> None:
        self.nodes, self.work, self.texts = nodes, work, logs
        self.created: dict[str, tuple[float, dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.calls = 0

    def _lag(self) -> None:
        with self.lock:
            self.calls += 1
        time.sleep(LATENCY)

    def _done(self, name: str) -> bool:
        at = self.created.get(name)
        return at is not None and time.monotonic() - at[0] >= self.work

    def apply(self, obj: dict[str, Any], force: bool = False) -> dict[str, Any]:
        self._lag()
        if obj["kind"] == "Job":
            with self.lock:
                self.created[obj["metadata"]["name"]] = (time.monotonic(), obj)
        return obj

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> Any:
        self._lag()
        return self._job(name)

    def _job(self, name: str) -> dict[str, Any]:
        done = [{"type": "Complete", "status": "True"}] if self._done(name) else []
        return {"metadata": {"name": name}, "status": {"conditions": done}}

    def list(self, api_version: str, kind: str, namespace: str = "", selector: str = "") -> Any:
        self._lag()
        if kind == "Node":
            return self.nodes
        if kind == "Job":
            return [self._job(name) for name in list(self.created)]
        if kind == "Pod":
            jobs = [selector.split(",")[0].split("=")[1]] if selector else list(self.created)
            return [
                {
                    "metadata": {
                        "name": f"{job}-0",
                        "labels": {"batch.kubernetes.io/job-name": job},
                    },
                    "status": {"phase": "Succeeded" if self._done(job) else "Running"},
                }
                for job in jobs
            ]
        return []

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        self._lag()
        job = pod.removesuffix("-0")
        node = self.created[job][1]["metadata"].get("annotations", {}).get("fmctl.dev/node", "")
        return self.texts.get(container or "", "").replace("NODE", node)

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> bool:
        self._lag()
        return True


def _node(name: str, pool: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"fmctl.dev/pool": pool}},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "16"},
        },
    }


def collect() -> tuple[list[Row], str]:
    """gather() at each size: wall, API calls, and the largest's ratio to one node's."""
    sys.path.insert(0, str(ROOT))
    from provisioner.catalog import load_catalog
    from provisioner.check.kube_gather import gather
    from provisioner.render.context import build_context
    from provisioner.render.pools import POOL_LABEL
    from provisioner.spec.source import load_source
    from provisioner.validate import validate_document
    from tests.tools.efa_rule import efa_devices

    doc, _ = load_source(str(ROOT / "examples/p5en-eks-fsx-s3.yaml"))
    spec = validate_document(doc, "kubernetes").resolved
    assert spec is not None
    context = build_context(spec, load_catalog())
    pool = context.pools[0].name
    data = ROOT / "tests/data/check"
    fi_info = (data / "fi_info-p5en-healthy.txt").read_text()
    frame = "==> fmctl-check NODE {} <==\n{}"
    texts = {
        "gpu": frame.format("pool", f"{pool}\n")
        + frame.format("nvidia-smi.csv", (data / "nvidia-smi-p5en.csv").read_text())
        + frame.format("dcgmi-diag.json", (data / "dcgmi-diag-healthy.json").read_text()),
        "efa": frame.format("pool", f"{pool}\n")
        + frame.format("fi_info.txt", fi_info)
        + frame.format("efa-devices.txt", efa_devices(fi_info)),
    }
    work = 240.0 * SCALE
    lines = [f"{'nodes':>6} {'wall s':>7} {'API calls':>9} {'node work s':>11}"]
    walls: dict[int, float] = {}
    for size in SIZES:
        nodes = [_node(f"ip-10-0-{i // 250}-{i % 250}", pool) for i in range(size)]
        for n in nodes:
            n["metadata"]["labels"][POOL_LABEL] = pool
        api = LaggedApi(nodes, work, texts)
        with tempfile.TemporaryDirectory(prefix="fmctl-bench-check-") as folder:
            start = time.perf_counter()
            got = gather(api, context, Path(folder), nccl=False, scale=SCALE)  # type: ignore[arg-type]
            walls[size] = time.perf_counter() - start
        assert not got.skipped, got.skipped[:3]
        lines.append(f"{size:>6} {walls[size]:>7.2f} {api.calls:>9} {work:>11.1f}")
    largest = SIZES[-1]
    rows = [
        Row(
            "scale",
            f"fmctl check, {largest} nodes (20 ms API, node work 1/20 real), s",
            walls[largest],
            "one-node check s",
            walls[1],
            "<=",
            1.3,
        )
    ]
    return rows, "\n".join(lines)


if __name__ == "__main__":
    rows, text = collect()
    print(text)
    for row in rows:
        print(f"{row.measure}: {row.value:.2f} vs {row.against_value:.2f} -> {row.ratio:.2f}")
