"""Start-up of the commands users type most, as medians over repeated runs, against targets.

Prints a table; it is not a test (wall times on a shared 2-core machine are noisy). Run it
with `make bench`. Targets come from the issues: --help <= 0.15 s, validate and render <=
0.3 s; ParallelCluster's own `pcluster version` is measured in the same run, for scale.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from table import Row, machine

ROOT = Path(__file__).resolve().parent.parent
RUNS = int(os.environ.get("FMCTL_BENCH_RUNS", "15"))


def _fmctl() -> list[str]:
    exe = shutil.which("fmctl", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "provisioner"]


def measure(args: list[str]) -> tuple[float, float]:
    """Median and minimum wall time of running ``args`` (output discarded)."""
    times = []
    # As users run it: compiled modules cached (this machine's environment sets
    # PYTHONDONTWRITEBYTECODE, which makes every run compile fmctl's sources afresh).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(args, capture_output=True, check=False, cwd=ROOT, env=env)  # warm the cache
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            cwd=ROOT,
            env=env,
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def collect() -> tuple[list[Row], str]:
    """Every case measured: the headline rows (targets, and ParallelCluster's CLI as the
    reference) and the detailed table."""
    import tempfile

    fmctl = _fmctl()
    example = str(ROOT / "examples/p5-slurm-capacity-block.yaml")
    out = tempfile.mkdtemp(prefix="fmctl-bench-render-")
    home = Path(tempfile.mkdtemp(prefix="fmctl-bench-home-"))
    os.environ["FMCTL_HOME"] = str(home)
    sys.path.insert(0, str(ROOT))
    from fmctl_sandbox import daemon

    daemon.ensure(home)  # plan --sandbox against a running emulator, as users have it
    # The emulator loads its services on first use: let that finish before timing anything
    # (it would steal a core from the first commands measured).
    subprocess.run(
        [*fmctl, "plan", "-f", example, "--sandbox"], capture_output=True, check=False, cwd=ROOT
    )
    pcluster = ROOT / ".venv-pcluster/bin/pcluster"
    cases = [
        ("python -c pass (floor)", [sys.executable, "-c", "pass"], None),
        ("fmctl --help", [*fmctl, "--help"], 0.15),
        ("fmctl validate (p5 example)", [*fmctl, "validate", "-f", example], 0.30),
        (
            "fmctl validate (broken spec)",
            [*fmctl, "validate", "-f", str(ROOT / "tests/data/demo-broken.yaml")],
            0.30,
        ),
        ("fmctl render (p5 example)", [*fmctl, "render", "-f", example, "-o", out], 0.30),
        ("fmctl plan --offline", [*fmctl, "plan", "-f", example, "--offline"], None),
        ("fmctl plan --sandbox", [*fmctl, "plan", "-f", example, "--sandbox"], None),
        ("fmctl catalog", [*fmctl, "catalog"], None),
    ]
    if pcluster.exists():
        cases.append(("pcluster version (ParallelCluster)", [str(pcluster), "version"], None))
    lines = [
        f"{RUNS} runs each; command: {' '.join(fmctl)}",
        f"{'command':<36} {'median s':>9} {'min s':>7} {'target s':>9} {'median/target':>14}",
    ]
    medians: dict[str, float] = {}
    try:
        for name, args, target in cases:
            median, low = measure(args)
            medians[name] = median
            ratio = f"{median / target:.2f}" if target else "-"
            lines.append(f"{name:<36} {median:>9.3f} {low:>7.3f} {target or '-':>9} {ratio:>14}")
    finally:
        daemon.stop(home)
    reference = medians.get("pcluster version (ParallelCluster)")
    rows = []
    for name, _, target in cases:
        if not name.startswith("fmctl") or name == "fmctl catalog":
            continue
        rows.append(
            Row(
                "start-up",
                f"{name} (median s)",
                medians[name],
                "pcluster version" if reference else "-",
                reference,
                # Held to the absolute target: the ratio shows the distance to pcluster.
                None,
                None,
            )
            if target is None
            else Row("start-up", f"{name} (median s)", medians[name], "target s", target, "<=", 1)
        )
    if reference:
        rows.append(
            Row(
                "start-up",
                "fmctl validate (p5 example) (median s)",
                medians["fmctl validate (p5 example)"],
                "pcluster version",
                reference,
                "<=",
                1,
            )
        )
    return rows, "\n".join(lines)


def main() -> None:
    print(machine())
    print(collect()[1])


if __name__ == "__main__":
    main()
