"""Jinja set up for configuration files: strict undefined, explicit quoting, no HTML escapes."""

from __future__ import annotations

import functools
import json
from typing import Any

import jinja2

from provisioner.shipped import shipped_dir


def quote(value: Any) -> str:
    """A YAML-safe scalar: strings double-quoted (JSON is valid YAML), others as JSON."""
    return json.dumps(value)


@functools.cache
def environment() -> jinja2.Environment:
    """The template environment; an undefined name is an error, never an empty string."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(shipped_dir("templates"))),
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
