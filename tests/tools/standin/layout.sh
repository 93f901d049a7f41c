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
# installer's fi_info, enroot, the AWS CLI's s3 commands, and systemctl without a running
# systemd. Each says what it follows.
install -m 0755 "$tools/nvidia-smi" /usr/bin/nvidia-smi
install -m 0755 "$tools/dcgmi" /usr/bin/dcgmi
install -d /opt/amazon/efa/bin
install -m 0755 "$tools/fi_info" /opt/amazon/efa/bin/fi_info
install -m 0755 "$tools/enroot" /usr/bin/enroot
install -m 0755 "$tools/aws" /usr/local/bin/aws
mv /usr/bin/systemctl /usr/bin/systemctl.real
install -m 0755 "$tools/systemctl" /usr/bin/systemctl
install -d /etc/standin

# A user's account, as the AMI's default user (ec2-user / ubuntu / rocky): uid 1000.
id ubuntu >/dev/null 2>&1 || useradd --uid 1000 --create-home --shell /bin/bash ubuntu
# munge's key directory as the package makes it; the key is the cluster's, written per node.
install -d -o munge -g munge -m 0700 /etc/munge
rm -f /etc/munge/munge.key
