#!/bin/bash
# NCCL over EFA: the environment every job on an EFA node needs. Sourced by
# task-prolog.sh (every Slurm task), /etc/profile.d/fmctl-nccl.sh (login shells) and
# jobs/nccl-tests.sbatch. Without FI_PROVIDER=efa and a working aws-ofi-nccl plugin, NCCL
# silently falls back to TCP sockets.

export FI_PROVIDER=efa
# GPUDirect RDMA over EFA, only where the device has RDMA read (on-node-start.sh recorded the
# catalog's answer): libfabric aborts with it on g5. aws-ofi-nccl >= 1.7 with libfabric >= 1.18
# picks it by itself when unset.
if [ -f /etc/fmctl/node.env ] && grep -qx 'FMCTL_EFA_RDMA_READ=true' /etc/fmctl/node.env; then
  export FI_EFA_USE_DEVICE_RDMA=1
fi
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
