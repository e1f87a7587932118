"""Load an AttentionSpec from a YAML file, YAML text or a mapping.

Every failure is a SpecError naming the file, the line, the YAML path of the field and the
allowed values. The YAML is composed into a node tree (never constructed by PyYAML's generic
constructor), so line numbers survive; anchors and aliases are refused before they expand, which
defuses alias bombs, and files above MAX_SPEC_BYTES are refused before they are parsed.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel, ValidationError

from .errors import SpecError
from .spec import HEAD_DIMS, MAX_STAGES, MIN_STAGES, Arch, AttentionSpec, DType, MaskKind, Pipeline, PipelineKind, Tiles

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


def _values(enum: Any) -> str:
    return ", ".join(member.value for member in enum)


_TILE_SIZES = "multiples of 16 from 16 to 256"

#: What each field accepts, keyed by YAML path with list indices dropped.
ALLOWED: dict[str, str] = {
    "name": "letters, digits, '_', '.' and '-', at most 64 characters, not starting with '.' or '-'",
    "head_dim": ", ".join(map(str, HEAD_DIMS)),
    "dtype": _values(DType),
    "mask": _values(MaskKind),
    "window": "[left, right] with each side >= 0, or -1 for unbounded",
    "arch": f"{_values(Arch)} (one, or a list)",
    "pipeline": f"{_values(PipelineKind)}, or {{kind: multistage, stages: {MIN_STAGES}..{MAX_STAGES}}}",
    "pipeline.kind": _values(PipelineKind),
    "pipeline.stages": f"an integer from {MIN_STAGES} to {MAX_STAGES} (with kind: multistage)",
    "tiles": "a mapping with any of block_m, block_n, num_warps",
    "tiles.block_m": _TILE_SIZES,
    "tiles.block_n": _TILE_SIZES,
    "tiles.num_warps": "1, 2, 4, 8, 16",
}

#: The model that validates the mapping at each YAML path (for "did you mean" on unknown keys).
_MODELS: dict[str, type[BaseModel]] = {"": AttentionSpec, "pipeline": Pipeline, "tiles": Tiles}


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
            return AttentionSpec.model_validate(dict(source))
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
        return AttentionSpec.model_validate(data)
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
    return f"the scalar {_short(node.value)!r}"


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = _printable(key)
    return f"{path}.{key}" if path else key


def _to_python(loader: _SpecLoader, node: yaml.Node, path: str, lines: dict[str, int]) -> Any:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        return _mapping(loader, node, path, lines)
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _SEQ_TAG:
            raise _Refused(f"YAML tag {node.tag!r} is not allowed in a spec", line, path)
        items = []
        for index, item in enumerate(node.value):
            child = _join(path, index)
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
        child = _join(path, key)
        if key in result:
            raise _Refused(f"duplicate key '{_short(key)}' (first given on line {lines[child]})", line, child)
        lines[child] = line
        result[key] = _to_python(loader, value_node, child, lines)
    return result


def _key_kind(node: yaml.Node) -> str:
    if not isinstance(node, yaml.ScalarNode):
        return _node_kind(node)
    tag = node.tag.rsplit(":", 1)[-1]
    return f"'{_short(node.value)}', which YAML reads as {tag} (quote it if you mean the name)"


def _valid_keys_hint(path: str) -> str:
    model = _MODELS.get(path)
    return f"; valid keys: {', '.join(model.model_fields)}" if model else ""


# ---- pydantic errors -> SpecError ----------------------------------------------------------

class _Issue(NamedTuple):
    rank: int
    line: int | None
    path: str
    full_path: str
    message: str


def spec_error_from_validation(exc: ValidationError, source: str | None = None,
                               lines: Mapping[str, int] | None = None) -> SpecError:
    """One SpecError for a pydantic ValidationError of AttentionSpec (or one of its parts).

    `lines` maps YAML paths ("", "mask", "window[1]", "pipeline.stages") to 1-based lines; the
    first problem (unknown keys first, then in document order, missing keys last) leads the
    message and the others follow it, one line each.
    """
    issues = [_issue(err, lines) for err in exc.errors()]
    if lines is not None and "name" not in lines and len(issues) > 1:
        # A derived name is only invalid because another field is; that field is the problem.
        issues = [i for i in issues if i.full_path != "name"] or issues
    issues.sort(key=lambda i: (i.rank, i.line or 0))
    first = issues[0]
    message = first.message
    for other in issues[1:6]:
        where = f"line {other.line}, " if other.line is not None else ""
        message += f"\n  also ({where}{other.path or 'top level'}): {other.message}"
    if len(issues) > 6:
        message += f"\n  ... and {len(issues) - 6} more problems"
    return SpecError(message, source=source, line=first.line, path=first.path or None)


def _issue(err: Any, lines: Mapping[str, int] | None) -> _Issue:
    kind = err["type"]
    loc = _refine(tuple(err["loc"]), err, kind)
    full = _path_of(loc)
    path, line = _locate(loc, lines, keep_missing=kind == "missing")
    rank = 0 if kind in ("extra_forbidden", "invalid_key") else 2 if kind == "missing" else 1
    message = _message(err, kind, loc, path)
    allowed = ALLOWED.get(_generic(path)) or ALLOWED.get(_generic(full))
    if allowed and kind not in ("extra_forbidden", "invalid_key") and "allowed" not in message.lower():
        message += f"; allowed: {allowed}"
    if kind == "enum":
        message += _did_you_mean(err.get("input"), re.findall(r"'([^']*)'", str((err.get("ctx") or {})
                                                                              .get("expected", ""))))
    return _Issue(rank, line, path, full, message)


def _path_of(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path = _join(path, part if isinstance(part, int) else str(part))
    return path


def _generic(path: str) -> str:
    return re.sub(r"\[\d+\]", "", path)


def _refine(loc: tuple[Any, ...], err: Any, kind: str) -> tuple[Any, ...]:
    """Point a whole-model or whole-list error at the key or item it is about."""
    value = err.get("input")
    if kind == "value_error" and isinstance(value, Mapping):
        message = err["msg"]
        for word in re.findall(r"[A-Za-z_]+", message):
            if word in value:
                return (*loc, word)
        for key, item in value.items():
            if isinstance(item, str) and f"'{item}'" in message:
                return (*loc, key)
    if kind == "value_error" and _generic(_path_of(loc)) == "window" and isinstance(value, (list, tuple)):
        for index, side in enumerate(value):
            if isinstance(side, int) and side < -1:
                return (*loc, index)
    return loc


def _locate(loc: tuple[Any, ...], lines: Mapping[str, int] | None,
            keep_missing: bool) -> tuple[str, int | None]:
    """The path to report (the deepest one present in the document) and its line."""
    full = _path_of(loc)
    if lines is None:
        return full, None
    path, line = "", lines.get("")
    for depth in range(1, len(loc) + 1):
        prefix = _path_of(loc[:depth])
        if prefix not in lines:
            break
        path, line = prefix, lines[prefix]
    return (full if keep_missing else path), line


_EXPECTED = {"string_type": "a string", "str_type": "a string", "tuple_type": "a list", "list_type": "a list",
             "model_type": "a mapping", "model_attributes_type": "a mapping", "dict_type": "a mapping"}


def _message(err: Any, kind: str, loc: tuple[Any, ...], path: str) -> str:
    value = err.get("input")
    ctx = err.get("ctx") or {}
    leaf = loc[-1] if loc else ""
    if kind == "missing":
        if isinstance(leaf, int):
            return f"too few items: item {leaf} is missing"
        return f"required key '{leaf}' is missing"
    if kind == "extra_forbidden":
        return _unknown_key(str(leaf), _path_of(loc[:-1]))
    if kind == "invalid_key":
        return f"keys must be names (strings), got {_short(leaf)!r}"
    if kind == "enum":
        return f"{_describe(value)} is not a valid {_field_word(path)}"
    if kind in ("value_error", "assertion_error"):
        return re.sub(r"^(Value error|Assertion failed), ", "", err["msg"])
    if kind in ("int_type", "int_parsing", "int_from_float"):
        quoted = "; write it without quotes" if isinstance(value, str) and value.strip().isdigit() else ""
        return f"expected an integer, got {_describe(value)}{quoted}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_describe(value)}"
    if kind in ("too_long", "too_short"):
        wanted = ctx.get("max_length", ctx.get("min_length"))
        return f"expected {wanted} items, got {ctx.get('actual_length')}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"{_describe(value)} is out of range"
    if kind == "string_pattern_mismatch":
        return f"{_describe(value)} is not a valid {_field_word(path)}"
    return f"{err['msg']} (got {_describe(value)})"


def _unknown_key(key: str, parent: str) -> str:
    model = _MODELS.get(_generic(parent))
    valid = list(model.model_fields) if model else []
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key '{_short(key)}'; did you mean '{close[0]}'?"
    listing = f"; valid keys: {', '.join(valid)}" if valid else ""
    return f"unknown key '{_short(key)}'{listing}"


def _did_you_mean(value: Any, choices: list[str]) -> str:
    if not choices:
        return ""
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.5) if isinstance(value, str) else []
    return f"; did you mean '{close[0]}'?" if close else ""


def _field_word(path: str) -> str:
    generic = _generic(path)
    return "pipeline kind" if generic == "pipeline.kind" else generic.rsplit(".", 1)[-1] or "value"


def _describe(value: Any) -> str:
    if value is None:
        return "null (an empty value)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the integer {_short(value)}"
    if isinstance(value, float):
        return f"the number {_short(value)}"
    if isinstance(value, str):
        return f"the string {_short(value)!r}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a value of type {type(value).__name__}"


def _short(value: Any, limit: int = 40) -> str:
    text = _printable(str(value))
    return text if len(text) <= limit else text[:limit] + "..."


def _printable(text: str) -> str:
    """Control characters escaped, so a hostile key cannot drive the terminal."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
