"""Read a spec file into plain data while keeping where every key and value came from.

PyYAML's constructors forget positions, so we compose the node graph ourselves and build the
data from it, recording the 1-based line and column of each value and each mapping key under
its spec path. The same walk rejects what a config file should not contain: duplicate keys,
custom tags, recursive aliases and alias bombs. Nothing here raises on bad input: every
failure becomes a ``Problem`` with a position.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from provisioner.spec.problems import Position, Problem, SpecPath

#: A spec is a page of YAML; anything this large is a mistake (or an attack on the parser).
MAX_SPEC_BYTES = 1024 * 1024
#: Bound on values built from the node graph, so a few aliases cannot expand into millions.
MAX_VALUES = 100_000

_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_KNOWN_SCALAR_TAGS = {
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    _STR_TAG,
}


@dataclass
class SourceDoc:
    """A loaded spec: its data, its text, and a map from spec paths to source positions."""

    name: str
    text: str
    data: Any = None
    values: dict[SpecPath, Position] = field(default_factory=dict)
    keys: dict[SpecPath, Position] = field(default_factory=dict)

    def locate(self, path: SpecPath, *, prefer_key: bool = False) -> Position:
        """Where ``path`` is in the file; falls back to the nearest enclosing path that exists."""
        probe = tuple(path)
        while True:
            table = (self.keys, self.values) if prefer_key else (self.values, self.keys)
            for marks in table:
                if probe in marks:
                    return marks[probe]
            if not probe:
                return Position(1, 1)
            probe = probe[:-1]

    def line_text(self, line: int) -> str:
        """The source line (1-based), without its newline; empty when out of range."""
        lines = self.text.splitlines()
        return lines[line - 1] if 0 < line <= len(lines) else ""


class _BuildError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _tag_problem(node: yaml.Node, path: SpecPath) -> Problem:
    return Problem(
        "yaml-tag",
        f"unsupported YAML tag {node.tag!r}",
        path,
        hint="a spec holds plain strings, numbers, booleans, lists and mappings; remove the tag",
        position=_pos(node.start_mark),
    )


def _pos(mark: Any) -> Position:
    return Position(mark.line + 1, mark.column + 1)


class _Builder:
    """Turns a composed YAML node graph into Python data, recording positions."""

    def __init__(self, doc: SourceDoc) -> None:
        self.doc = doc
        self.count = 0
        self.active: set[int] = set()
        self.scalars = yaml.constructor.SafeConstructor()

    def build(self, node: yaml.Node, path: SpecPath) -> Any:
        self.count += 1
        if self.count > MAX_VALUES:
            raise _BuildError(
                Problem(
                    "yaml-too-large",
                    f"the document expands to more than {MAX_VALUES} values",
                    path,
                    hint="a spec does not need this many values; check for aliases (*name) "
                    "that repeat large anchored blocks",
                    position=_pos(node.start_mark),
                )
            )
        self.doc.values.setdefault(path, _pos(node.start_mark))
        if id(node) in self.active:
            raise _BuildError(
                Problem(
                    "yaml-recursive-alias",
                    "an alias refers to the block that contains it",
                    path,
                    hint="a recursive structure cannot be a spec; copy the values instead",
                    position=_pos(node.start_mark),
                )
            )
        if isinstance(node, yaml.MappingNode):
            self._check_tag(node, path, "tag:yaml.org,2002:map")
            self.active.add(id(node))
            try:
                return self._mapping(node, path)
            finally:
                self.active.discard(id(node))
        if isinstance(node, yaml.SequenceNode):
            self._check_tag(node, path, "tag:yaml.org,2002:seq")
            self.active.add(id(node))
            try:
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            finally:
                self.active.discard(id(node))
        return self._scalar(node, path)

    def _check_tag(self, node: yaml.Node, path: SpecPath, plain: str) -> None:
        """A list or mapping carries its plain tag: !!python/object and friends are refused
        like scalar tags, not silently dropped."""
        if node.tag != plain:
            raise _BuildError(_tag_problem(node, path))

    def _scalar(self, node: yaml.Node, path: SpecPath) -> Any:
        if node.tag == _TIMESTAMP_TAG:
            # Dates are never spec values; keep the text so type errors quote what was written.
            return node.value
        if node.tag not in _KNOWN_SCALAR_TAGS:
            raise _BuildError(_tag_problem(node, path))
        try:
            return self.scalars.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError) as exc:
            raise _BuildError(
                Problem(
                    "yaml-value",
                    f"cannot read this value: {exc}",
                    path,
                    position=_pos(node.start_mark),
                )
            ) from exc

    def _mapping(self, node: yaml.MappingNode, path: SpecPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.update(self._merge_sources(value_node, path))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise _BuildError(
                    Problem(
                        "yaml-key",
                        "a mapping key must be a plain name",
                        path,
                        hint="use a string key such as 'name:'",
                        position=_pos(key_node.start_mark),
                    )
                )
            key = key_node.value
            if key_node.tag != _STR_TAG:
                key = str(self._scalar(key_node, path))
            child = (*path, key)
            if key in out:
                first = self.doc.keys.get(child)
                where = f" (first at line {first.line})" if first else ""
                raise _BuildError(
                    Problem(
                        "yaml-duplicate-key",
                        f"duplicate key '{key}'{where}",
                        child,
                        hint="YAML keeps only the last of duplicate keys; remove one of them",
                        position=_pos(key_node.start_mark),
                    )
                )
            self.doc.keys[child] = _pos(key_node.start_mark)
            self.doc.values.pop(child, None)
            out[key] = self.build(value_node, child)
        # Explicit keys win over merged ones, as YAML's merge-key type specifies.
        return {**merged, **out} if merged else out

    def _merge_sources(self, node: yaml.Node, path: SpecPath) -> dict[str, Any]:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        merged: dict[str, Any] = {}
        for source in reversed(sources):  # earlier sources take precedence
            if not isinstance(source, yaml.MappingNode):
                raise _BuildError(
                    Problem(
                        "yaml-merge",
                        "a merge key ('<<') takes a mapping or a list of them",
                        path,
                        position=_pos(source.start_mark),
                    )
                )
            value = self.build(source, path)
            merged.update(value)
        return merged


def _read_text(path: str) -> tuple[str | None, Problem | None]:
    try:
        size = os.stat(path).st_size
        if size > MAX_SPEC_BYTES:
            return None, Problem(
                "file-too-large",
                f"the file is {size} bytes; a spec may be at most {MAX_SPEC_BYTES} bytes",
                hint="is this the right file?",
                position=Position(1, 1),
            )
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        reason = {
            errno.ENOENT: "no such file",
            errno.ELOOP: "too many levels of symbolic links",
            errno.EISDIR: "it is a directory",
            errno.EACCES: "permission denied",
        }.get(exc.errno or 0, exc.strerror or str(exc))
        return None, Problem(
            "file-unreadable",
            f"cannot read the spec: {reason}",
            hint="pass the path of a spec file with -f",
        )
    if len(raw) > MAX_SPEC_BYTES:  # the file grew between stat and read
        return None, Problem(
            "file-too-large", "the file is too large for a spec", position=Position(1, 1)
        )
    return decode_text(raw)


def decode_text(raw: bytes) -> tuple[str | None, Problem | None]:
    """Decode UTF-8 (with or without BOM); on failure, a problem at the offending byte."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        return None, Problem(
            "file-encoding",
            f"the file is not valid UTF-8 (byte 0x{raw[exc.start]:02x})",
            hint="save the spec as UTF-8 text",
            position=Position(line, column),
        )
    return text, None


def load_source(path: str, *, display_name: str | None = None) -> tuple[SourceDoc, list[Problem]]:
    """Read and parse a spec file. Returns the document and any problems (none on success)."""
    name = display_name or path
    text, problem = _read_text(path)
    if text is None:
        assert problem is not None
        return SourceDoc(name, ""), [problem]
    return parse_source(text, name)


def parse_source(text: str, name: str = "<spec>") -> tuple[SourceDoc, list[Problem]]:
    """Parse YAML text into a ``SourceDoc``; syntax problems come back located."""
    doc = SourceDoc(name, text)
    if not text.strip():
        return doc, [
            Problem(
                "empty",
                "the spec is empty",
                hint="start from `fmctl init`",
                position=Position(1, 1),
            )
        ]
    try:
        # The pure-Python loader: the C one recurses natively and can overflow the C stack on
        # deeply nested input, where Python's recursion limit gives a clean error instead.
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is None:
            return doc, [
                Problem(
                    "empty",
                    "the spec holds no document",
                    hint="start from `fmctl init`",
                    position=Position(1, 1),
                )
            ]
        doc.data = _Builder(doc).build(node, ())
    except _BuildError as exc:
        return doc, [exc.problem]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = exc.problem or "invalid YAML"
        if exc.context:
            message = (
                f"{exc.context}: {message}"
                if "expected a single document" not in (exc.context or "")
                else message
            )
        hint = (
            "YAML indents with spaces only; replace the tab"
            if "\\t" in message
            else ("check the indentation and quoting around this position")
        )
        position = _pos(mark) if mark is not None else Position(1, 1)
        return doc, [Problem("yaml-syntax", message, hint=hint, position=position)]
    except yaml.YAMLError as exc:
        return doc, [Problem("yaml-syntax", str(exc), position=Position(1, 1))]
    except RecursionError:
        return doc, [
            Problem(
                "yaml-too-deep",
                "the document is nested too deeply",
                hint="a spec is a few levels deep; is this the right file?",
                position=Position(1, 1),
            )
        ]
    if not isinstance(doc.data, dict):
        kind = type(doc.data).__name__
        kind = {"list": "a list", "str": "a string", "NoneType": "nothing"}.get(kind, kind)
        return doc, [
            Problem(
                "not-a-mapping",
                f"the spec must be a mapping of keys, but it is {kind}",
                hint="a spec starts with 'apiVersion: fmctl.dev/v1alpha1' and "
                "'kind: Cluster'; see `fmctl init`",
                position=Position(1, 1),
            )
        ]
    return doc, []
