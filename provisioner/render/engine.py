"""Jinja set up for configuration files: strict undefined, explicit quoting, no HTML escapes."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from typing import Any

import jinja2

from provisioner.shipped import shipped_dir


def quote(value: Any) -> str:
    """A YAML-safe scalar: strings double-quoted (JSON is valid YAML), others as JSON."""
    return json.dumps(value)


class _QuietCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates on disk (compiling them is a quarter of a render's time); a cache
    that cannot be read or written is no error, only slower."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # noqa: BLE001 - a corrupt or unreadable entry: compile afresh
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "fmctl", f"jinja-{jinja2.__version__}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return _QuietCache(folder)


@functools.cache
def environment() -> jinja2.Environment:
    """The template environment; an undefined name is an error, never an empty string."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(shipped_dir("templates"))),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = quote
    env.filters["json"] = lambda v, indent=None: json.dumps(v, indent=indent, sort_keys=True)
    return env


def render_template(name: str, **context: Any) -> str:
    """Render ``templates/NAME`` with ``context``."""
    return environment().get_template(name).render(**context)
