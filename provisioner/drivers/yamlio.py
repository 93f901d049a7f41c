"""YAML in, fast: PyYAML's libyaml-backed safe loader where the installed PyYAML has it (its
wheels on PyPI are built with libyaml), else its pure-Python one, which reads the same YAML.
The charts fmctl templates (Kueue's alone is 1.7 MB of CRDs) take ten times as long through
the pure-Python loader: more than a second of every `plan` and `up` on EKS."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

#: The loader: libyaml's where built, else PyYAML's own.
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> Any:
    """The one document in ``text`` (None when empty)."""
    return yaml.load(text, Loader=LOADER)


def load_all(text: str) -> Iterator[Any]:
    """Each document in ``text``, empty ones as None."""
    return yaml.load_all(text, Loader=LOADER)
