"""Printing problems: ``file:line:col: level: path: message``, the line, a caret, a hint."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TextIO

import click

from provisioner.spec.problems import Problem

if TYPE_CHECKING:
    from provisioner.ops.validate import Validation

_STOP = set(" \t,}]#")


def _token_width(line: str, column: int) -> int:
    """Length of the token starting at ``column`` (1-based), at least 1."""
    start = column - 1
    if start >= len(line):
        return 1
    if line[start] in "\"'":
        end = line.find(line[start], start + 1)
        return (end - start + 1) if end > start else 1
    end = start
    while end < len(line) and line[end] not in _STOP:
        end += 1
    if line[start:end].endswith(":"):
        end -= 1
    return max(1, end - start)


def format_problem(validation: Validation, problem: Problem, *, color: bool = False) -> str:
    """One problem as a located, multi-line message."""
    pos = validation.position(problem)
    doc = validation.doc
    level_color = "red" if problem.level == "error" else "yellow"
    level = click.style(problem.level, fg=level_color, bold=True) if color else problem.level
    head = f"{doc.name}:{pos.line}:{pos.column}: {level}: "
    if problem.path:
        head += f"{problem.dotted_path}: "
    lines = [head + problem.message]
    source = doc.line_text(pos.line)  # "" when there is no such line (or no text)
    if source.strip():
        shown = source.replace("\t", " ")
        gutter = f"{pos.line:>5} | "
        caret = "^" + "~" * (_token_width(shown, pos.column) - 1)
        lines.append(gutter + shown)
        lines.append(
            " " * (len(gutter) - 2)
            + "| "
            + " " * (pos.column - 1)
            + (click.style(caret, fg=level_color) if color else caret)
        )
    if problem.hint:
        lines.append(("hint: " if not color else click.style("hint: ", fg="cyan")) + problem.hint)
    return "\n".join(lines)


def use_color(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org:
    any non-empty value)."""
    import os

    return stream.isatty() and not os.environ.get("NO_COLOR")


def print_problems(validation: Validation, out: TextIO, *, color: bool = False) -> None:
    """All problems, then a one-line summary."""
    for problem in validation.problems:
        out.write(format_problem(validation, problem, color=color) + "\n\n")
    errors = sum(p.level == "error" for p in validation.problems)
    warnings = len(validation.problems) - errors
    if errors or warnings:
        out.write(f"{validation.doc.name}: {errors} error(s), {warnings} warning(s)\n")


def problems_json(validation: Validation) -> dict[str, Any]:
    """The problems as data (``-o json``)."""
    items = []
    for problem in validation.problems:
        pos = validation.position(problem)
        items.append(
            {
                "file": validation.doc.name,
                "line": pos.line,
                "column": pos.column,
                "level": problem.level,
                "code": problem.code,
                "path": problem.dotted_path,
                "message": problem.message,
                "hint": problem.hint,
            }
        )
    return {"valid": validation.ok, "problems": items}


def dump_json(data: Any) -> str:
    """Stable, readable JSON."""
    return json.dumps(data, indent=2, sort_keys=False)
