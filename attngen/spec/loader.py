"""Load an AttentionSpec from a YAML file, YAML text or a mapping.

Every failure is a SpecError naming the file, the line, the YAML path of the field and the
allowed values. The YAML is composed into a node tree (never constructed by PyYAML's generic
constructor), so line numbers survive; anchors and aliases are refused before they expand, which
defuses alias bombs, and files above MAX_SPEC_BYTES are refused before they are parsed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import SpecError
from .messages import ALLOWED, MODELS, join_path, short_repr, spec_error_from_validation
from .model import AttentionSpec

#: Specs are a handful of lines; anything larger is not a spec.
MAX_SPEC_BYTES = 64 * 1024
#: Deepest nesting a spec needs is 3 (pipeline -> stages); the composer recurses per level.
MAX_DEPTH = 16

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_STR_TAG = "tag:yaml.org,2002:str"
#: Scalar tags a spec may hold (timestamps resolve implicitly; pydantic then refuses them by type).
_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{t}"
                         for t in ("str", "int", "float", "bool", "null", "timestamp"))


class _Refused(Exception):
    """A YAML construct a spec may not use; converted to SpecError with the source name."""

    def __init__(self, message: str, line: int | None, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path


class _SpecLoader(yaml.SafeLoader):
    """Composes nodes only; refuses anchors and aliases outright and bounds the nesting depth."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused("YAML anchors and aliases (&name, *name) are not allowed in a spec; "
                           "write each value out", event.start_mark.line + 1)
        if self._depth >= MAX_DEPTH:
            raise _Refused(f"nesting deeper than {MAX_DEPTH} levels; a spec is a flat mapping",
                           event.start_mark.line + 1)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# ---- public API ----------------------------------------------------------------------------

def load_spec(source: str | os.PathLike[str] | Mapping[str, Any] | AttentionSpec) -> AttentionSpec:
    """An AttentionSpec from a YAML file path or a mapping; SpecError on any problem."""
    if isinstance(source, AttentionSpec):
        return source
    if isinstance(source, Mapping):
        try:
            return AttentionSpec.pydantic_validate(dict(source))
        except ValidationError as exc:
            raise spec_error_from_validation(exc) from None
    if not isinstance(source, (str, os.PathLike)):
        raise SpecError(f"expected a path to a YAML spec or a mapping, got {type(source).__name__}")
    return load_spec_text(_read_file(Path(source)), source_name=str(source))


def load_spec_text(text: str, source_name: str = "<string>") -> AttentionSpec:
    """An AttentionSpec from YAML text; `source_name` is what error messages call it."""
    if not isinstance(text, str):
        raise SpecError(f"expected YAML text, got {type(text).__name__}", source=source_name)
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise SpecError(f"larger than {MAX_SPEC_BYTES} bytes; a spec is a few lines of YAML",
                        source=source_name)
    data, lines = _parse(text, source_name)
    try:
        return AttentionSpec.pydantic_validate(data)
    except ValidationError as exc:
        raise spec_error_from_validation(exc, source=source_name, lines=lines) from None


def _read_file(path: Path) -> str:
    name = str(path)
    hint = "; to load YAML text, use load_spec_text" if "\n" in name or ": " in name else ""
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "is a directory, not a YAML spec file")
        with path.open("rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"spec file not found{hint}", source=name) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SpecError(f"cannot read the spec file: {reason}{hint}", source=name) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"larger than {MAX_SPEC_BYTES} bytes; a spec is a few lines of YAML", source=name)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise SpecError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x})", source=name, line=line) from None


# ---- YAML -> (data, lines) -----------------------------------------------------------------

def _parse(text: str, source: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The top-level mapping as plain Python values, and the line of every YAML path in it."""
    loader: _SpecLoader | None = None
    try:
        loader = _SpecLoader(text)
        node = loader.get_single_node()
        if node is None:
            raise _Refused("the spec is empty; it needs at least 'head_dim' and 'dtype' "
                           f"(head_dim: one of {ALLOWED['head_dim']}; dtype: {ALLOWED['dtype']})", 1)
        if not isinstance(node, yaml.MappingNode) or node.tag != _MAP_TAG:
            raise _Refused(f"the top level must be a mapping of keys (head_dim: 128, dtype: bf16, ...), "
                           f"got {_node_kind(node)}", node.start_mark.line + 1)
        lines: dict[str, int] = {"": node.start_mark.line + 1}
        data = _to_python(loader, node, "", lines)
    except _Refused as exc:
        raise SpecError(exc.message, source=source, line=exc.line, path=exc.path or None) from None
    except yaml.MarkedYAMLError as exc:
        raise SpecError(_yaml_problem(exc), source=source, line=_yaml_line(exc)) from None
    except yaml.reader.ReaderError as exc:
        line = text[:exc.position].count("\n") + 1
        raise SpecError(f"malformed YAML: character {chr(exc.character)!r} (#x{exc.character:04x}) "
                        "is not allowed", source=source, line=line) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"malformed YAML: {exc}", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, lines


def _yaml_line(exc: yaml.MarkedYAMLError) -> int | None:
    mark = exc.problem_mark or exc.context_mark
    return mark.line + 1 if mark is not None else None


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    parts = [p for p in (exc.context, exc.problem) if p]
    return "malformed YAML: " + (", ".join(parts) if parts else "cannot parse")


def _node_kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.MappingNode):
        return f"a mapping tagged {node.tag}"
    return f"the scalar {short_repr(node.value)!r}"


def _to_python(loader: _SpecLoader, node: yaml.Node, path: str, lines: dict[str, int]) -> Any:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        return _mapping(loader, node, path, lines)
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _SEQ_TAG:
            raise _Refused(f"YAML tag {node.tag!r} is not allowed in a spec", line, path)
        items = []
        for index, item in enumerate(node.value):
            child = join_path(path, index)
            lines[child] = item.start_mark.line + 1
            items.append(_to_python(loader, item, child, lines))
        return items
    if node.tag not in _SCALAR_TAGS:
        raise _Refused(f"YAML tag {node.tag!r} is not allowed in a spec", line, path)
    return loader.construct_object(node, deep=True)


def _mapping(loader: _SpecLoader, node: yaml.MappingNode, path: str, lines: dict[str, int]) -> dict[str, Any]:
    if node.tag != _MAP_TAG:
        raise _Refused(f"YAML tag {node.tag!r} is not allowed in a spec", node.start_mark.line + 1, path)
    result: dict[str, Any] = {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR_TAG:
            raise _Refused(f"keys must be plain names, got {_key_kind(key_node)}{_valid_keys_hint(path)}",
                           line, path)
        key = key_node.value
        child = join_path(path, key)
        if key in result:
            raise _Refused(f"duplicate key '{short_repr(key)}' (first given on line {lines[child]})", line, child)
        lines[child] = line
        result[key] = _to_python(loader, value_node, child, lines)
    return result


def _key_kind(node: yaml.Node) -> str:
    if not isinstance(node, yaml.ScalarNode):
        return _node_kind(node)
    tag = node.tag.rsplit(":", 1)[-1]
    return f"'{short_repr(node.value)}', which YAML reads as {tag} (quote it if you mean the name)"


def _valid_keys_hint(path: str) -> str:
    model = MODELS.get(path)
    return f"; valid keys: {', '.join(model.model_fields)}" if model else ""
