"""Allow ``python -m provisioner``."""

from provisioner.cli.main import main

main()
