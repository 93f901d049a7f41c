"""The stand-in node: a root filesystem laid out as a ParallelCluster AMI, run as its node
runs its code (see README.md)."""
