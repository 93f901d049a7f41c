#!/bin/bash
# AWS PCS node bootstrap: the launch template's user data runs it as root from cloud-init on
# first boot (no login shell). What ParallelCluster's custom actions do, done here: records
# where PCS's installer put Slurm, mounts FSx for Lustre, then runs the same node scripts.
# Once per instance: a GPU node group's nodeBootstrapped stage (pcs-node-bootstrapped.sh)
# runs it too, since nothing orders PCS's stage after cloud-init's user data. Whichever
# comes first runs it, under a lock the other waits on, and marks it done
# (/var/lib/fmctl/bootstrapped); the other then finds it done. A run that failed leaves no
# mark: the next one tries again.
# Usage: pcs-node-bootstrap.sh login|compute S3_PREFIX SLURM_VERSION EFA GPUS EFA_DEVICES
#        RDMA_READ FSX|- [--imex] [on-node-configured.sh flags...]
#   --imex: an UltraServer node (p6e-gb200): the prolog forms each job's NVLink domain.
#   FSX is DNS@tcp:/MOUNTNAME:MOUNT_PATH (the file system's DNSName and MountName).
set -euo pipefail

usage="usage: pcs-node-bootstrap.sh login|compute S3_PREFIX SLURM_VERSION EFA GPUS EFA_DEVICES RDMA_READ FSX|- [flags]"
[ "$#" -ge 8 ] || { echo "$usage" >&2; exit 2; }
role="$1" prefix="$2" version="$3" efa="$4" gpus="$5" efa_devices="$6" rdma_read="$7" fsx="$8"
shift 8
imex=false
if [ "${1:-}" = --imex ]; then
  imex=true
  shift
fi

case "$role" in login | compute) ;; *) echo "role must be login or compute" >&2; exit 2 ;; esac
[[ "$prefix" == s3://* ]] || { echo "S3_PREFIX must be an s3:// URI" >&2; exit 2; }
[[ "$version" =~ ^[0-9]+\.[0-9]+$ ]] || { echo "SLURM_VERSION must be MAJOR.MINOR (24.11)" >&2; exit 2; }

state=/var/lib/fmctl
install -d -m 0755 "$state"
exec 9>"$state/bootstrap.lock"
flock 9
if [ -e "$state/bootstrapped" ]; then
  echo "fmctl: this node's bootstrap ran already ($(cat "$state/bootstrapped"))"
  exit 0
fi

# Where the AWS PCS Slurm installer puts this version (AWS PCS User Guide, "Install SPANK
# plugins on AWS PCS"); every fmctl script reads it through lib/slurm-prefix.sh.
install -d -m 0755 /etc/fmctl
printf 'FMCTL_SLURM_PREFIX=/opt/aws/pcs/scheduler/slurm-%s\n' "$version" >/etc/fmctl/slurm.env
chmod 0644 /etc/fmctl/slurm.env

if [ "$fsx" != - ]; then
  source="${fsx%:*}"
  mount_path="${fsx##*:}"
  [[ "$source" == *@tcp:/* && "$mount_path" == /* ]] || { echo "FSX must be DNS@tcp:/MOUNTNAME:/PATH" >&2; exit 2; }
  if ! command -v mount.lustre >/dev/null 2>&1; then
    # The Lustre client, as the FSx for Lustre guide installs it per distribution.
    if command -v amazon-linux-extras >/dev/null 2>&1; then
      amazon-linux-extras install -y lustre
    elif command -v dnf >/dev/null 2>&1; then
      dnf install -y lustre-client
    else
      echo "fmctl: no Lustre client and no way to install one here" >&2
      exit 1
    fi
  fi
  install -d -m 0755 "$mount_path"
  if ! grep -qs "[[:space:]]${mount_path}[[:space:]]lustre[[:space:]]" /etc/fstab; then
    printf '%s %s lustre defaults,relatime,flock,_netdev 0 0\n' "$source" "$mount_path" >>/etc/fstab
  fi
  # The file system answers as soon as the node's ENI is up; a few tries cover a slow start.
  for attempt in 1 2 3 4 5; do
    mountpoint -q "$mount_path" && break
    mount "$mount_path" && break
    echo "fmctl: mount of $mount_path failed (attempt $attempt), retrying" >&2
    sleep $((attempt * 5))
  done
  mountpoint -q "$mount_path" || { echo "fmctl: $mount_path is not mounted" >&2; exit 1; }
fi

home=/opt/fmctl/slurm
install -d -m 0755 "$home"
aws s3 sync --only-show-errors "$prefix" "$home"
find "$home" -name '*.sh' -exec chmod 0755 {} +
# The lock is this script's alone: what the node scripts leave running must not hold it.
if [ "$role" = compute ]; then
  "$home/actions/on-node-start.sh" "$efa" "$gpus" "$efa_devices" "$rdma_read" "$imex" 9>&-
fi
"$home/actions/on-node-configured.sh" "$role" "$prefix" "$@" 9>&-
date -u +%Y-%m-%dT%H:%M:%SZ >"$state/bootstrapped"
