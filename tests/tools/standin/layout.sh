#!/bin/bash
# Runs inside the freshly built root filesystem (chroot, as root): lays Debian's packages out
# as the ParallelCluster cookbook lays out its AMI, and puts the stand-in tools in place.
# Each step names the cookbook file (aws/aws-parallelcluster-cookbook, develop) it follows.
set -euo pipefail
tools=/tmp/standin-bin

# Slurm under /opt/slurm (cookbook attributes: cluster.slurm.install_dir = /opt/slurm; the
# cookbook builds Slurm with --prefix=/opt/slurm, so its commands are in /opt/slurm/bin and
# nowhere on the default PATH). Debian's binaries move there: a script that calls `scontrol`
# bare fails here as it fails on the AMI.
install -d /opt/slurm/bin /opt/slurm/sbin /opt/slurm/etc/scripts/prolog.d \
  /opt/slurm/etc/scripts/epilog.d /opt/slurm/etc/pcluster
for b in sacct sacctmgr salloc sattach sbatch sbcast scancel scontrol scrontab sdiag sinfo \
  sprio squeue sreport srun sshare sstat strigger; do
  [ -e "/usr/bin/$b" ] && mv "/usr/bin/$b" /opt/slurm/bin/
done
for b in slurmctld slurmd slurmstepd; do
  # Debian's /usr/sbin/slurmd is a symlink to slurmd-wlm: move the real file.
  real="$(readlink -f "/usr/sbin/$b")"
  mv "$real" "/opt/slurm/sbin/$b"
  rm -f "/usr/sbin/$b"
done
# Debian's Slurm looks for /etc/slurm/slurm.conf; the AMI's for /opt/slurm/etc/slurm.conf.
rm -rf /etc/slurm
ln -s /opt/slurm/etc /etc/slurm
# slurmstepd is found through the compiled-in sbin path (/usr/sbin on Debian).
ln -s /opt/slurm/sbin/slurmstepd /usr/sbin/slurmstepd

# /etc/profile.d/slurm.sh (templates/default/slurm/head_node/slurm.sh.erb): login shells only.
cat >/etc/profile.d/slurm.sh <<'SH'
PATH=$PATH:/opt/slurm/bin
MANPATH=$MANPATH:/opt/slurm/share/man
SH

# The examples the cookbook ships and does not enable (install_pyxis.rb, enroot recipes).
install -d /opt/parallelcluster/examples/spank /opt/parallelcluster/examples/pyxis \
  /opt/parallelcluster/examples/enroot
echo 'include /opt/slurm/etc/plugstack.conf.d/*' >/opt/parallelcluster/examples/spank/plugstack.conf
echo 'required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis' \
  >/opt/parallelcluster/examples/pyxis/pyxis.conf

# Stand-ins for what the AMI has and Debian cannot give: NVIDIA's tools, the EFA
# installer's fi_info and fi_pingpong, enroot, the AWS CLI's s3 commands, and systemctl
# without a running
# systemd. Each says what it follows.
install -m 0755 "$tools/nvidia-smi" /usr/bin/nvidia-smi
install -m 0755 "$tools/dcgmi" /usr/bin/dcgmi
# DCGM's host engine, as the datacenter-gpu-manager packages put it beside dcgmi.
install -m 0755 "$tools/nv-hostengine" /usr/bin/nv-hostengine
install -d /opt/amazon/efa/bin
install -m 0755 "$tools/fi_info" /opt/amazon/efa/bin/fi_info
install -m 0755 "$tools/fi_pingpong" /opt/amazon/efa/bin/fi_pingpong
install -m 0755 "$tools/enroot" /usr/bin/enroot
install -m 0755 "$tools/aws" /usr/local/bin/aws
mv /usr/bin/systemctl /usr/bin/systemctl.real
install -m 0755 "$tools/systemctl" /usr/bin/systemctl
mv /usr/bin/journalctl /usr/bin/journalctl.real
install -m 0755 "$tools/journalctl" /usr/bin/journalctl

# NVIDIA IMEX as ParallelCluster >= 3.14 installs it on every AMI but AL2
# (aws-parallelcluster-platform resources/nvidia_imex/partial/_nvidia_imex_common.rb): the
# daemon and its command client in /usr/bin (stand-ins), /etc/nvidia-imex/config.cfg with
# the settings that matter here (the cookbook's nvidia-imex-config template: the peer list
# file, the command service on port 50005, no bind address), a placeholder peer list, and
# its unit in /etc/systemd/system (Type=forking, ExecStart=/usr/bin/nvidia-imex -c CONFIG;
# the cookbook's nvidia-imex.service template). Installed, not enabled: the cookbook enables
# and starts it on GB200 compute nodes only.
install -m 0755 "$tools/nvidia-imex" /usr/bin/nvidia-imex
install -m 0755 "$tools/nvidia-imex-ctl" /usr/bin/nvidia-imex-ctl
install -d -m 0755 /etc/nvidia-imex
cat >/etc/nvidia-imex/config.cfg <<'CFG'
LOG_LEVEL=4
LOG_USE_SYSLOG=1
DAEMONIZE=1
BIND_INTERFACE_IP=
SERVER_PORT=50000
IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_CMD_ENABLED=1
IMEX_CMD_PORT=50005
CFG
printf '## placeholder addresses, as the cookbook ships them\n172.31.51.93\n172.31.48.43\n' \
  >/etc/nvidia-imex/nodes_config.cfg
cat >/etc/systemd/system/nvidia-imex.service <<'UNIT'
[Unit]
Description=NVIDIA IMEX service
After=network-online.target
Requires=network-online.target

[Service]
User=root
PrivateTmp=false
Type=forking
TimeoutStartSec=infinity
ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg
Restart=on-failure
RestartSec=1s

[Install]
WantedBy=multi-user.target
UNIT
# Checked now, once for every node built from this image (the stand-in systemctl's record).
systemctl standin-verify nvidia-imex
install -d /etc/standin

# A user's account, as the AMI's default user (ec2-user / ubuntu / rocky): uid 1000.
id ubuntu >/dev/null 2>&1 || useradd --uid 1000 --create-home --shell /bin/bash ubuntu
# munge's key directory as the package makes it; the key is the cluster's, written per node.
install -d -o munge -g munge -m 0700 /etc/munge
rm -f /etc/munge/munge.key
