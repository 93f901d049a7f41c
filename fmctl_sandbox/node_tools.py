"""The tools on a sandbox node, as fmctl's programs there call them: stand-ins for
``nvidia-smi``, ``dcgmi``, ``fi_info``, ``fi_pingpong`` and ``torchrun`` that answer from the
node's folder (``FMCTL_SANDBOX_HOST``): its GPUs as the driver's procfs lists them
(``node_gpus``), its EFA devices as the efa driver lays them out in /sys (``kube_programs``).

The sandbox's nodes have no GPUs and no fabric. What the stand-ins answer is what a healthy
node of that shape answers, in the real tool's own format, so that fmctl's node agent and
its verify gate (slurm/lib/health-detect.sh and verify-node.sh, run by a DaemonSet's program
or a Job's pod) can be rehearsed, and ``fmctl sandbox fault`` reaches them: a GPU taken off
the bus is gone from nvidia-smi's list and DCGM's results, an EFA device that went down from
fi_info's and fi_pingpong fails on it. Each answers only the questions fmctl asks; any other
fails and says so. Where the format comes from:

- ``nvidia-smi --query-gpu=... --format=csv,noheader[,nounits]``: a row per GPU, fields
  joined by ", " (tests/data/check/nvidia-smi-p5en.csv, recorded): its index, ``NVIDIA``
  and the model, a UUID of the node's own, its PCI bus as the driver lists it, its memory
  (the model and memory are DescribeInstanceTypes', ``GPU_ENV``, not what the driver
  reports), and no ECC errors to count (0). ``nvlink -s`` and ``-q -d ROW_REMAPPER`` print
  nothing: no NVLinks and no remap tables to show (fmctl then checks nothing of theirs).
- ``fi_info -p efa -t FI_EP_RDM``: a block per device, its RDM domain ``DEVICE-rdm``
  (tests/data/check/fi_info-p5en-healthy.txt); with none, libfabric's ``fi_getinfo: -61``
  (fi_info-no-efa.txt).
- ``dcgmi diag -r N -j``: DCGM 3's JSON ("DCGM GPU Diagnostic", categories of tests, each
  GPU's result by ``gpu_ids``: tests/data/check/dcgmi-diag-healthy.json, level 2): the
  Deployment tests at every level, PCIe and GPU Memory from level 2, every GPU passing,
  after as long as the level normally lasts (dcgmi-diag(1): level 2 about two minutes, 3
  about fifteen; 4 gives no figure: 3's) at the sandbox's scale (``SCALE_ENV``).
  ``dcgmi health -c -j``: the healthy answer (dcgmi-health-healthy.json; NVIDIA/DCGM
  dcgmi/Health.cpp). ``dcgmi discovery -l`` only says the engine answers.
- ``torchrun`` (fmctl's all-reduce, templates/kubernetes/nccl-test): rank 0's header and
  ``size= time_us= busbw_GBps=`` rows. No all-reduce runs: the figures are a perfect fabric's,
  the bus bandwidth at the node's network bandwidth (DescribeInstanceTypes' network cards,
  ``FMCTL_SANDBOX_NETWORK_GBPS``), which is what bus bandwidth stands for (NVIDIA's
  nccl-tests doc/PERFORMANCE.md: comparable to the bottleneck's peak hardware bandwidth).
  One node (NVLink only) is not simulated.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from fmctl_sandbox.node_gpus import GPUS

#: The env var that tells a stand-in where its node's folder is (a pod is not told it).
HOST_ENV = "FMCTL_SANDBOX_HOST"
#: The env var with the node's network bandwidth in Gbit/s (0: not known).
NETWORK_ENV = "FMCTL_SANDBOX_NETWORK_GBPS"
#: The env var with the sandbox's scale of AWS's durations (``Shims.scale``).
SCALE_ENV = "FMCTL_SANDBOX_SCALE"
#: The env var with the node's GPU model and memory in MiB, ``MODEL,MIB`` (",0": not known).
GPU_ENV = "FMCTL_SANDBOX_GPU"

#: What `fmctl check` asks nvidia-smi (slurm/lib/node-check.sh).
CHECK_QUERY = (
    "--query-gpu=index,name,uuid,pci.bus_id,memory.total,ecc.errors.uncorrected.volatile.total"
    " --format=csv,noheader,nounits"
)
#: Where the efa driver lists a node's devices, below its folder (``kube_programs``).
EFA_DEVICES = "sys/class/infiniband"
_GPUS = f'gpus="${{{HOST_ENV}:?}}/{GPUS}"'
_INFINIBAND = f'devices="${{{HOST_ENV}:?}}/{EFA_DEVICES}"'

NVIDIA_SMI = f"""#!/bin/sh
# The sandbox's stand-in for nvidia-smi (fmctl_sandbox/node_tools.py): this node's GPUs are
# the folders the driver's procfs lists in its folder.
{_GPUS}
indexes() {{
  i=0
  for gpu in "$gpus"/*/; do
    [ -d "$gpu" ] || continue
    echo "$i"
    i=$((i + 1))
  done
}}
case "$*" in
  "--query-gpu=index --format=csv,noheader") indexes ;;
  "{CHECK_QUERY}")
    model="${{{GPU_ENV}%%,*}}" mib="${{{GPU_ENV}##*,}}"
    [ "$mib" != 0 ] && [ -n "$mib" ] || mib="[N/A]"
    i=0
    for gpu in "$gpus"/*/; do
      [ -d "$gpu" ] || continue
      bus=$(basename "$gpu" | tr a-f A-F)
      sum=$(printf '%s' "$gpu" | cksum | cut -d' ' -f1)
      printf '%s, NVIDIA %s, GPU-%08x-0000-4000-8000-%012x, 0000%s, %s, 0\n' \
        "$i" "$model" "$sum" "$i" "$bus" "$mib"
      i=$((i + 1))
    done ;;
  "--query-gpu=index,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits")
    indexes | sed 's/$/, 0/' ;;
  "nvlink -s" | "-q -d ROW_REMAPPER") ;;
  *)
    echo "sandbox: nvidia-smi $* is not answered here" >&2
    exit 2 ;;
esac
"""

FI_INFO = f"""#!/bin/sh
# The sandbox's stand-in for libfabric's fi_info (fmctl_sandbox/node_tools.py): an RDM
# endpoint per EFA device in the node's /sys.
{_INFINIBAND}
if [ "$*" != "-p efa -t FI_EP_RDM" ]; then
  echo "sandbox: fi_info $* is not answered here" >&2
  exit 2
fi
found=0
for device in "$devices"/*/; do
  [ -d "$device" ] || continue
  found=1
  printf 'provider: efa\\n    fabric: efa\\n    domain: %s-rdm\\n    version: 122.0\\n' \\
    "$(basename "$device")"
  printf '    type: FI_EP_RDM\\n    protocol: FI_PROTO_EFA\\n'
done
if [ "$found" = 0 ]; then
  echo "fi_getinfo: -61 (No data available)"
  exit 1
fi
"""

FI_PINGPONG = f"""#!/bin/sh
# The sandbox's stand-in for libfabric's fi_pingpong (fmctl_sandbox/node_tools.py): traffic
# passes through a domain whose EFA device is in the node's /sys; the server waits for it.
{_INFINIBAND}
domain="" peer=""
while [ $# -gt 0 ]; do
  case "$1" in
    -d) domain="$2"; shift 2 ;;
    -e | -p) shift 2 ;;
    -*) echo "sandbox: fi_pingpong $1 is not answered here" >&2; exit 2 ;;
    *) peer="$1"; shift ;;
  esac
done
if [ -z "$domain" ] || [ ! -d "$devices/${{domain%-rdm}}" ]; then
  echo "fi_getinfo: -61 (No data available)" >&2
  exit 1
fi
if [ -z "$peer" ]; then
  exec sleep 15
fi
echo "sandbox: 1 client of $peer through $domain, traffic passed"
"""

DCGMI = f"""#!/bin/bash
# The sandbox's stand-in for DCGM's dcgmi (fmctl_sandbox/node_tools.py): every GPU in the
# node's folder passes.
{_GPUS}
ids=()
for gpu in "$gpus"/*/; do
  [ -d "$gpu" ] && ids+=("${{#ids[@]}}")
done
per_gpu() {{  # NAME: a test whose results are by GPU
  local sep="" id
  printf '{{"name": "%s", "results": [' "$1"
  for id in "${{ids[@]}}"; do
    printf '%s{{"gpu_ids": "%s", "status": "Pass"}}' "$sep" "$id"
    sep=", "
  done
  printf ']}}'
}}
case "$1 $2" in
  "discovery -l") echo "sandbox: ${{#ids[@]}} GPUs (the engine answers)" ;;
  "health -c")
    printf '{{"body": {{"Overall Health": {{"value": "Healthy"}}}}, '
    printf '"header": ["Health Monitor Report"]}}\n' ;;
  "health -s") ;;
  "diag -r")
    level="$3"
    case "$level" in 2) normal=120 ;; 3 | 4) normal=900 ;; *) normal=0 ;; esac
    sleep "$(awk -v s="$normal" -v k="${{{SCALE_ENV}:-0}}" 'BEGIN {{ printf "%.3f", s * k }}')"
    printf '{{"DCGM GPU Diagnostic": {{"test_categories": [{{"category": "Deployment", "tests": ['
    sep=""
    for test in Denylist "NVML Library" "CUDA Main Library" \\
      "Permissions and OS-related Blocks" "Persistence Mode" "Environmental Variables" \\
      "Page Retirement/Row Remap" "Graphics Processes" Inforom; do
      printf '%s{{"name": "%s", "results": [{{"status": "Pass"}}]}}' "$sep" "$test"
      sep=", "
    done
    printf ']}}'
    if [ "$level" -ge 2 ]; then
      printf ', {{"category": "Integration", "tests": [%s]}}' "$(per_gpu PCIe)"
      printf ', {{"category": "Hardware", "tests": [%s]}}' "$(per_gpu "GPU Memory")"
    fi
    printf ']}}, "version": "3.3.9"}}\\n' ;;
  *)
    echo "sandbox: dcgmi $* is not answered here" >&2
    exit 2 ;;
esac
"""

TORCHRUN = f"""#!/bin/sh
# The sandbox's stand-in for torchrun running fmctl's all-reduce (fmctl_sandbox/node_tools.py):
# no all-reduce runs; rank 0 prints a perfect fabric's figures, at the node's network
# bandwidth.
nodes=1 per=1 rank=0
for arg in "$@"; do
  case "$arg" in
    --nnodes=*) nodes="${{arg#*=}}" ;;
    --nproc-per-node=*) per="${{arg#*=}}" ;;
    --node-rank=*) rank="${{arg#*=}}" ;;
  esac
done
gbps="${{{NETWORK_ENV}:-0}}"
if [ "$nodes" -lt 2 ]; then
  echo "sandbox: an all-reduce on one node (NVLink only) is not simulated" >&2
  exit 2
fi
if [ "$gbps" = 0 ]; then
  echo "sandbox: this node's network bandwidth is not known, no all-reduce to show" >&2
  exit 2
fi
[ "$rank" = 0 ] || exit 0
ranks=$((nodes * per))
echo "# nccl-allreduce ranks=$ranks nodes=$NODE_NAME (sandbox: simulated, no GPUs)"
awk -v ranks="$ranks" -v gbps="$gbps" 'BEGIN {{
  busbw = gbps / 8
  for (p = 20; p < 34; p += 2) {{
    size = 2 ^ p
    seconds = 2 * (ranks - 1) / ranks * size / (busbw * 1e9)
    printf "size=%.0f time_us=%.1f busbw_GBps=%.2f\\n", size, seconds * 1e6, busbw
  }}
}}'
"""

TOOLS = {
    "nvidia-smi": NVIDIA_SMI,
    "fi_info": FI_INFO,
    "fi_pingpong": FI_PINGPONG,
    "dcgmi": DCGMI,
    "torchrun": TORCHRUN,
}


@functools.cache
def tools() -> str:
    """The folder with the stand-ins: written once per sandbox process (mkdtemp's 0700, so
    no other user can change what the nodes' programs run) and removed when it exits."""
    folder = Path(tempfile.mkdtemp(prefix="fmctl-sandbox-tools-"))
    for name, text in TOOLS.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    atexit.register(shutil.rmtree, folder, True)
    return str(folder)
