"""Where the files fmctl ships beside its code live: templates/, slurm/ and charts/.

A wheel carries them under ``provisioner/_shipped/``; a checkout (and an editable install)
has them at the top of the repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

Shipped = Literal["templates", "slurm", "charts"]
_PACKAGE = Path(__file__).resolve().parent


def shipped_dir(name: Shipped) -> Path:
    """The directory holding the shipped folder ``name``."""
    for candidate in (_PACKAGE / "_shipped" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"fmctl's {name}/ folder is missing from this installation")
