"""Fake node tools and a fake Slurm for the check's tests: each prints what tests/data/check
recorded. They read FAKE (a test's folder: sinfo.txt, broken, nccl.txt; calls is appended
to) and DATA (tests/data/check) from the environment; SMI and FI_INFO name the recorded
nvidia-smi and fi_info outputs of a healthy node (p5's by default)."""

from __future__ import annotations

from pathlib import Path

#: The node named in $FAKE/broken has a GPU fallen off the bus.
NVIDIA_SMI = """#!/bin/bash
me="${NODE_NAME:-$SLURMD_NODENAME}"
if grep -qx "$me" "$FAKE/broken"; then cat "$DATA/nvidia-smi-lost-gpu.csv"
else cat "$DATA/${SMI:-nvidia-smi-healthy.csv}"; fi
"""
DCGMI = '#!/bin/sh\ncat "$DATA/dcgmi-diag-healthy.json"\n'
FI_INFO = '#!/bin/sh\ncat "$DATA/${FI_INFO:-fi_info-p5-healthy.txt}"\n'
# sinfo --noheader --Node --partition=P --format='%N %t'
SINFO = '#!/bin/bash\ncat "$FAKE/sinfo.txt"\n'
#: srun --label ... --nodelist=A,B ... --input=all bash -s -- - POOL: one task per node.
SRUN = """#!/bin/bash
echo "srun $*" >> "$FAKE/calls"
nodes=""
while [ $# -gt 0 ]; do
  case "$1" in --nodelist=*) nodes="${1#--nodelist=}" ;; --*) ;; *) break ;; esac
  shift
done
stdin=$(mktemp); cat > "$stdin"
i=0
for node in ${nodes//,/ }; do
  SLURMD_NODENAME="$node" "$@" < "$stdin" | sed "s/^/$i: /"; i=$((i + 1))
done
"""
#: sbatch --output=LOG ...: the recorded all_reduce_perf log ($FAKE/nccl.txt) as the job's.
SBATCH = """#!/bin/bash
echo "sbatch $*" >> "$FAKE/calls"
for arg; do
  case "$arg" in --output=*) cp "$FAKE/nccl.txt" "${arg#--output=}" ;; esac
done
"""

#: A Slurm cluster's nodes and head node, as the tests see them.
SLURM = {
    "sinfo": SINFO,
    "srun": SRUN,
    "sbatch": SBATCH,
    "nvidia-smi": NVIDIA_SMI,
    "dcgmi": DCGMI,
    "fi_info": FI_INFO,
}


def install(folder: Path, tools: dict[str, str]) -> Path:
    """Write ``tools`` as executables into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in tools.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder
