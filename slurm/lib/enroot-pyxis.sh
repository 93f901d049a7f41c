#!/bin/bash
# Containers in Slurm jobs: enroot, and pyxis's `srun --container-image`. Usage:
#   enroot-pyxis.sh head|compute [DATA_DIR]
# ParallelCluster AMIs carry enroot (/usr/bin/enroot) and pyxis
# (/usr/local/lib/slurm/spank_pyxis.so) but enable neither: the cookbook ships
# plugstack.conf, pyxis.conf and enroot.conf only as examples under
# /opt/parallelcluster/examples/ and creates no runtime directory
# (aws-parallelcluster-cookbook: install_pyxis.rb, config.rb; AWS's own pyxis post-install
# script in aws-samples/aws-parallelcluster-post-install-scripts does the same steps).
# pyxis must be in plugstack.conf on the head node too: srun registers its options there.
# With DATA_DIR (local NVMe), enroot keeps image layers and unpacked containers there, not on
# the root volume.
set -euo pipefail
export PATH="/opt/slurm/bin:/opt/slurm/sbin:$PATH"

role="${1:?usage: enroot-pyxis.sh head|compute [DATA_DIR]}"
data="${2:-}"
case "$role" in head | compute) ;; *) echo "role must be head or compute" >&2; exit 2 ;; esac
[ -z "$data" ] || [[ "$data" == /* ]] || { echo "DATA_DIR must be absolute" >&2; exit 2; }

if ! command -v enroot >/dev/null; then
  echo "fmctl: enroot is not installed on this image; no containers in jobs" >&2
  exit 0
fi

# enroot: per-user runtime under /run (tmpfs, world-writable and sticky as every user's jobs
# create their own), cache and data on NVMe when there is some, else under /var/enroot as
# ParallelCluster's example enroot.conf has it.
install -d -m 1777 /run/enroot /run/pyxis
cache=/var/enroot/cache data_dir=/var/enroot/data temp=/tmp
if [ -n "$data" ]; then
  install -d -m 1777 "$data/enroot" "$data/enroot/cache" "$data/enroot/data" "$data/enroot/tmp"
  cache="$data/enroot/cache" data_dir="$data/enroot/data" temp="$data/enroot/tmp"
else
  install -d -m 1777 /var/enroot /var/enroot/cache /var/enroot/data
fi
install -d -m 0755 /etc/enroot
cat >/etc/enroot/enroot.conf <<CONF
ENROOT_RUNTIME_PATH /run/enroot/user-\$(id -u)
ENROOT_CACHE_PATH $cache/user-\$(id -u)
ENROOT_DATA_PATH $data_dir/user-\$(id -u)
ENROOT_TEMP_PATH $temp
ENROOT_SQUASH_OPTIONS -noI -noD -noF -noX -no-duplicates
ENROOT_MOUNT_HOME n
ENROOT_RESTRICT_DEV y
ENROOT_ROOTFS_WRITABLE y
CONF

# pyxis: plugstack.conf includes plugstack.conf.d/*, where pyxis.conf loads the plugin.
etc=/opt/slurm/etc
pyxis=""
for candidate in /usr/local/lib/slurm/spank_pyxis.so /opt/slurm/lib/slurm/spank_pyxis.so; do
  [ -f "$candidate" ] && { pyxis="$candidate"; break; }
done
if [ -z "$pyxis" ]; then
  echo "fmctl: pyxis is not installed on this image; enroot only" >&2
  exit 0
fi
install -d -m 0755 "$etc/plugstack.conf.d"
if ! grep -qs '^[[:space:]]*include[[:space:]].*plugstack\.conf\.d' "$etc/plugstack.conf"; then
  echo "include $etc/plugstack.conf.d/*" >>"$etc/plugstack.conf"
fi
echo "required $pyxis runtime_path=/run/pyxis" >"$etc/plugstack.conf.d/pyxis.conf"
chmod 0644 "$etc/plugstack.conf" "$etc/plugstack.conf.d/pyxis.conf"

# Slurm reads plugstack.conf when a daemon starts: the controller reconfigures, a compute
# node's slurmd restarts (if it already runs; else it reads it when it starts).
if [ "$role" = head ]; then
  scontrol reconfigure || echo "fmctl: scontrol reconfigure failed; pyxis takes effect at slurmctld's next start" >&2
elif systemctl is-active --quiet slurmd 2>/dev/null; then
  systemctl restart slurmd
fi
echo "fmctl: enroot${data:+ (data on $data)} and pyxis enabled"
