"""slurm/lib/efa-metrics.sh against a sysfs tree laid out as the efa driver lays it out:
EFA devices' hw_counters become fmctl_efa_hw_stat, other RDMA devices are left out, the
device count is reported beside the catalog's, and promtool accepts the format."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "slurm/lib/efa-metrics.sh"


def _device(sys: Path, name: str, driver: str, counters: dict[str, str]) -> None:
    (sys / "bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
    pci = sys / "devices" / name
    pci.mkdir(parents=True)
    (pci / "driver").symlink_to(sys / "bus/pci/drivers" / driver)
    dev = sys / "class/infiniband" / name
    (dev / "ports/1/hw_counters").mkdir(parents=True)
    (dev / "device").symlink_to(pci)
    for key, value in counters.items():
        (dev / "ports/1/hw_counters" / key).write_text(value + "\n")


def test_efa_devices_only_with_their_counters(tmp_path: Path) -> None:
    sys = tmp_path / "sys"
    _device(sys, "rdmap16s27", "efa", {"rx_bytes": "1024", "tx_bytes": "2048", "rx_drops": "0"})
    _device(sys, "rdmap32s27", "efa", {"rx_bytes": "5", "lifespan": "12", "bogus": "n/a"})
    _device(sys, "mlx5_0", "mlx5_core", {"rx_bytes": "99"})
    out = tmp_path / "efa.prom"
    subprocess.run(["sh", str(SCRIPT), str(out), "32", str(sys)], check=True, timeout=30)
    text = out.read_text()
    assert 'fmctl_efa_hw_stat{device="rdmap16s27",port="1",stat="tx_bytes"} 2048' in text
    assert 'fmctl_efa_hw_stat{device="rdmap32s27",port="1",stat="lifespan"} 12' in text
    assert "mlx5_0" not in text and "bogus" not in text
    assert "fmctl_efa_devices 2\n" in text and "fmctl_efa_devices_expected 32\n" in text
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing: `make tools` installs Debian's prometheus")
        return
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_no_device_is_reported_as_zero_not_silence(tmp_path: Path) -> None:
    out = tmp_path / "efa.prom"
    subprocess.run(["sh", str(SCRIPT), str(out), "16", str(tmp_path / "empty")], check=True)
    assert "fmctl_efa_devices 0\n" in out.read_text()
