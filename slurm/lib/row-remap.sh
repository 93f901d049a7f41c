#!/bin/bash
# fmctl_row_remaps: the GPUs whose row remapper has a flag set, one "BUS pending" or "BUS
# failure" line each, from `nvidia-smi -q -d ROW_REMAPPER` (on stdin): a "GPU BUS" line per
# GPU, then its "Remapped Rows" section with "Pending : Yes|No" and "Remapping Failure
# Occurred : Yes|No" (the form of a recorded 8 x H100 answer, tests/data/real/README.md).
# Ampere and newer GPUs remap a bad HBM row to a spare one: pending until the GPU is next
# reset; failed when no spare was left, which NVIDIA's RMA policy names (GPU Memory Error
# Management, "Error Recovery and Response Flags"). Only lines inside Remapped Rows count:
# the full `nvidia-smi -q` has other "Pending" lines (MIG mode, ECC mode).
# Sourced by health-agent.sh and verify-node.sh.
fmctl_row_remaps() {
  awk '
    /^GPU [0-9A-Fa-f]+:[0-9A-Fa-f:.]+[[:space:]]*$/ {gpu = $2; section = 0; next}
    /^    [^ ]/ {section = ($0 ~ /^    Remapped Rows/); next}
    section && /^        Pending[[:space:]]*:[[:space:]]*Yes/ {print gpu, "pending"}
    section && /^        Remapping Failure Occurred[[:space:]]*:[[:space:]]*Yes/ {print gpu, "failure"}'
}

# fmctl_row_remaps_of FLAG: of those lines (stdin), the GPUs with FLAG, as "BUS, BUS".
fmctl_row_remaps_of() {
  awk -v flag="$1" '$2 == flag {printf "%s%s", sep, $1; sep = ", "}'
}
