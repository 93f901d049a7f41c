#!/bin/bash
# fmctl_nvlinks: each GPU's NVLinks that are up, one "GPU LINKS" line per GPU, from
# `nvidia-smi nvlink -s` (on stdin): a "GPU N: NAME (UUID: ...)" line per GPU, then a line
# per link, "Link 3: 25 GB/s" when it is up (the form of a recorded p4de answer:
# aws-samples/awsome-distributed-training 1.architectures/efa-cheatsheet.md at 7217859f).
# A link not up reports no speed, whatever its words; GPUs without NVLink list no links.
# Sourced by health-agent.sh and verify-node.sh.
fmctl_nvlinks() {
  awk '
    /^GPU [0-9]+:/ {gpu = $2; sub(/:$/, "", gpu); order[++n] = gpu; up[gpu] = 0}
    /^[[:space:]]+Link [0-9]+: [0-9.]+ GB\/s/ && n {up[gpu]++}
    END {for (i = 1; i <= n; i++) print order[i], up[order[i]]}'
}

# fmctl_nvlinks_short WANT: of "GPU LINKS" lines (stdin), those GPUs with fewer than WANT
# links up, as "GPU 3: 17 of 18, ...".
fmctl_nvlinks_short() {
  awk -v want="$1" '$2 < want {printf "%sGPU %s: %d of %d", sep, $1, $2, want; sep = ", "}'
}

# fmctl_nvlinks_best: of "GPU LINKS" lines (stdin), the most links any one GPU has up (0
# for none): what every GPU of the node should have.
fmctl_nvlinks_best() {
  awk '$2 > m {m = $2} END {print m + 0}'
}
