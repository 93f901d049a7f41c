"""`fmctl estimate`: where a training step's time goes on a cluster, from the catalog alone."""
