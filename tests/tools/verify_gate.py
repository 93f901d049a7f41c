"""The EKS verify gate in the sandbox, for its end-to-end test (tests/engine/test_verify_gate.py)
and its benchmark (benchmarks/verify_gate.py): the tools a sandbox node answers the gate's
checks with, and what a person or a test reads and does to a cluster's GPU nodes."""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

from tests.check import fakes
from tests.conftest import ROOT
from tests.engine.harness import Sandbox, kube_client

DATA, REAL = ROOT / "tests/data/check", ROOT / "tests/data/real"
TAINT = "fmctl.dev/unverified"

#: The node's tools, each answering the question verify-node.sh (and the pair's all-reduce)
#: asks with what a p5en node printed (tests/data/check/README.md, tests/data/real/README.md);
#: the node named in $FAKE/broken (every node, when it says "every"), and the first node to
#: run the gate once $FAKE/fail-once is there, have a GPU fallen off the bus. fi_pingpong
#: passes and says it ran.
TOOLS = {
    "nvidia-smi": """#!/bin/bash
csv="$DATA/nvidia-smi-p5en.csv"
# $FAKE/fail-once: the first node to look after it was made takes it (mv is atomic).
if [ -e "$FAKE/fail-once" ]; then mv "$FAKE/fail-once" "$FAKE/failing-$NODE_NAME" 2>/dev/null; fi
if grep -qx -e "$NODE_NAME" -e every "$FAKE/broken" || [ -e "$FAKE/failing-$NODE_NAME" ]; then
  csv="$DATA/nvidia-smi-lost-gpu.csv"
fi
case "$*" in
  # The health agent's count (health-detect.sh): the indexes only.
  "--query-gpu=index --format=csv,noheader") awk -F', ' '/^[0-9]/ { print $1 }' "$csv" ;;
  *--query-gpu=index,ecc.errors.uncorrected.volatile.total*)
    awk -F', ' '/^[0-9]/ { print $1 ", " $6; next } { print }' "$csv" ;;
  "nvlink -s") cat "$DATA/nvidia-smi-nvlink-p5-healthy.txt" ;;
  "-q -d ROW_REMAPPER") cat "$REAL/nvidia-smi-q-remapped-rows-h100x8.txt" ;;
  *) cat "$csv" ;;
esac
""",
    # A diagnostic lasts what install() was told (none: at once).
    "dcgmi": """#!/bin/sh
[ "$1" = diag ] && sleep "$DIAG_SECONDS"
cat "$DATA/dcgmi-diag-healthy.json"
""",
    "nv-hostengine": "#!/bin/sh\nexit 0\n",
    "fi_info": '#!/bin/sh\ncat "$DATA/fi_info-p5en-healthy.txt"\n',
    # The 2-node pair's all-reduce (fmctl's allreduce.py under torchrun): rank 0's log of a
    # healthy pair of p5en (tests/data/check/README.md).
    "torchrun": '#!/bin/sh\ncat "$DATA/nccl-k8s-p5en-2nodes-healthy.txt"\n',
    "fi_pingpong": """#!/bin/bash
case " $* " in
  *" localhost "*) echo "$NODE_NAME $*" >> "$FAKE/pingpong" ;;
  *) sleep 2 ;;
esac
""",
}


def install(folder: Path, diag_seconds: float = 0.0) -> Path:
    """TOOLS in ``folder``/tools, wrapped with the fakes' settings (``folder``/broken names
    the broken node, none at first; ``folder``/pingpong records the loopbacks; a DCGM
    diagnostic takes ``diag_seconds``); the folder of tools, for ``Sandbox.node_tools``."""
    real, tools = fakes.install(folder / "fakes", TOOLS), folder / "tools"
    tools.mkdir(parents=True)
    (folder / "broken").write_text("\n")
    for name in TOOLS:
        wrapper = tools / name
        wrapper.write_text(
            f'#!/bin/bash\nexport FAKE="{folder}" DATA="{DATA}" REAL="{REAL}" '
            f"DIAG_SECONDS={diag_seconds:g}\n"
            f'exec "{real / name}" "$@"\n'
        )
        wrapper.chmod(0o755)
    return tools


def nodes(sandbox: Sandbox, name: str, region: str) -> dict[str, dict[str, Any]]:
    api = kube_client(sandbox, name, region)
    try:
        return {
            n["metadata"]["name"]: n for n in api.list("v1", "Node", selector="fmctl.dev/pool=gpu")
        }
    finally:
        api.close()


def tainted(node: dict[str, Any]) -> bool:
    return any(t["key"] == TAINT for t in node["spec"].get("taints") or [])


def verdicts(sandbox: Sandbox, name: str, region: str) -> dict[str, str]:
    """Each GPU node's verdict ("" while it has none)."""
    return {
        node: (n["metadata"].get("annotations") or {}).get("fmctl.dev/verify", "")
        for node, n in nodes(sandbox, name, region).items()
    }


def clear(sandbox: Sandbox, name: str, region: str, node: str) -> None:
    """What a person does to have a failed node tried again (`kubectl annotate node NODE
    fmctl.dev/verify-`): a merge patch that removes the verdict."""
    from provisioner.drivers.eks_auth import token

    aws = sandbox.aws(region)
    cluster = aws.client("eks").describe_cluster(name=name)["cluster"]
    request = urllib.request.Request(
        f"{cluster['endpoint']}/api/v1/nodes/{node}?fieldManager=kubectl-annotate",
        data=json.dumps({"metadata": {"annotations": {"fmctl.dev/verify": None}}}).encode(),
        method="PATCH",
        headers={
            "Authorization": f"Bearer {token(aws, name)}",
            "Content-Type": "application/merge-patch+json",
        },
    )
    context = ssl.create_default_context(cafile=sandbox.info["ca"])
    with urllib.request.urlopen(request, context=context, timeout=30) as reply:
        assert reply.status == 200


def repair_note(node: dict[str, Any]) -> str:
    """What the controller says of a failed node's repair ("" when nothing)."""
    return str((node["metadata"].get("annotations") or {}).get("fmctl.dev/verify-repair", ""))


def controller_log(sandbox: Sandbox, name: str, region: str) -> str:
    """The verify controller's log, as `kubectl logs deploy/fmctl-verify` shows it."""
    api = kube_client(sandbox, name, region)
    try:
        (pod,) = [
            p["metadata"]["name"]
            for p in api.list("v1", "Pod", "fmctl-system")
            if p["metadata"]["name"].startswith("fmctl-verify-")
            and "batch.kubernetes.io/job-name" not in p["metadata"].get("labels", {})
        ]
        return str(api.logs("fmctl-system", pod))
    finally:
        api.close()
