#!/bin/bash
# NCCL over EFA: the environment every job on an EFA node needs. Sourced by
# /etc/profile.d/fmctl-nccl.sh and by jobs/nccl-tests.sbatch. Without FI_PROVIDER=efa and a
# working aws-ofi-nccl plugin, NCCL silently falls back to TCP sockets.

export FI_PROVIDER=efa
# GPUDirect RDMA over EFA (P5 and later).
export FI_EFA_USE_DEVICE_RDMA=1
# Let processes fork (dataloader workers) without corrupting registered EFA memory.
export FI_EFA_FORK_SAFE=1
# Bootstrap traffic on the primary interface, never loopback or container bridges.
export NCCL_SOCKET_IFNAME="^lo,docker,veth"
# aws-ofi-nccl's tuner picks algorithms and protocols for AWS topologies.
if [ -f /opt/amazon/ofi-nccl/lib/libnccl-ofi-tuner.so ]; then
  export NCCL_TUNER_PLUGIN=/opt/amazon/ofi-nccl/lib/libnccl-ofi-tuner.so
elif [ -f /opt/amazon/ofi-nccl/lib64/libnccl-ofi-tuner.so ]; then
  export NCCL_TUNER_PLUGIN=/opt/amazon/ofi-nccl/lib64/libnccl-ofi-tuner.so
fi
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
