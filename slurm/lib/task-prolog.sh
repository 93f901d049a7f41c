#!/bin/bash
# Slurm TaskProlog (slurm.conf, set by fmctl through CustomSlurmSettings): slurmstepd runs it
# as the job's user before each task and applies every `export NAME=VALUE` line it prints to
# the task's environment. Batch jobs read no /etc/profile.d, so this is how the NCCL/EFA
# environment reaches them. Off EFA nodes it prints nothing. A variable the user already
# set is left as they set it.
# The head node installs it as /opt/slurm/etc/scripts/fmctl-task-prolog.sh, shared with every
# compute node; it never fails a task (a node without fmctl's files gets no variables).
node_env=/etc/fmctl/node.env
nccl_env=/opt/fmctl/slurm/lib/nccl-env.sh
grep -qx 'FMCTL_EFA_ENABLED=true' "$node_env" 2>/dev/null || exit 0
[ -f "$nccl_env" ] || exit 0
before="$(env)"
# shellcheck source=nccl-env.sh
. "$nccl_env"
for name in FI_PROVIDER FI_EFA_USE_DEVICE_RDMA FI_EFA_FORK_SAFE NCCL_SOCKET_IFNAME \
  NCCL_TUNER_PLUGIN NCCL_DEBUG; do
  value="${!name-}"
  [ -n "$value" ] || continue
  printf '%s\n' "$before" | grep -q "^$name=" && continue
  printf 'export %s=%s\n' "$name" "$value"
done
exit 0
