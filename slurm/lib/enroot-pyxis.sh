#!/bin/bash
# enroot keeps container layers and unpacked images on local NVMe (DATA_DIR), not on the
# root volume; pyxis gives srun --container-image. Usage: enroot-pyxis.sh DATA_DIR
set -euo pipefail

data="${1:?usage: enroot-pyxis.sh DATA_DIR}"
[[ "$data" == /* ]] || { echo "DATA_DIR must be absolute" >&2; exit 2; }

if ! command -v enroot > /dev/null; then
  echo "enroot is not installed on this image; skipping container set-up" >&2
  exit 0
fi
install -d -m 1777 "$data/enroot" "$data/enroot/cache" "$data/enroot/data"
install -d -m 0755 /etc/enroot
cat > /etc/enroot/enroot.conf <<CONF
ENROOT_RUNTIME_PATH /run/enroot/user-\$(id -u)
ENROOT_CACHE_PATH $data/enroot/cache/user-\$(id -u)
ENROOT_DATA_PATH $data/enroot/data/user-\$(id -u)
ENROOT_TEMP_PATH $data/enroot/tmp
ENROOT_SQUASH_OPTIONS -noI -noD -noF -noX -no-duplicates
ENROOT_MOUNT_HOME n
ENROOT_RESTRICT_DEV y
ENROOT_ROOTFS_WRITABLE y
CONF
install -d -m 1777 "$data/enroot/tmp"

plugstack=/opt/slurm/etc/plugstack.conf.d
pyxis=$(find /usr/local/lib/slurm /opt/slurm/lib/slurm -name spank_pyxis.so 2> /dev/null | head -n 1 || true)
if [ -n "$pyxis" ]; then
  install -d -m 0755 "$plugstack"
  echo "required $pyxis runtime_path=/run/pyxis" > "$plugstack/pyxis.conf"
fi
echo "fmctl: enroot data on $data${pyxis:+, pyxis enabled}"
