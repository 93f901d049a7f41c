"""The ``fmctl`` command line: thin click commands over ``provisioner.ops``."""
