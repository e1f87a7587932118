"""Readable SpecError messages from pydantic's validation errors: the field's YAML path, its line,
what was given and what is allowed (with a "did you mean" for near misses)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

from ..errors import SpecError
from ..planning import search_space
from .model import (
    HEAD_DIMS,
    MAX_STAGES,
    MIN_STAGES,
    Arch,
    AttentionSpec,
    DType,
    MaskKind,
    Pipeline,
    PipelineKind,
    Tiles,
)


def _values(enum: Any) -> str:
    return ", ".join(member.value for member in enum)


def _tries(field: str) -> str:
    return search_space.tries(list(search_space.SPACES.values()), field)


#: What each field accepts, keyed by YAML path with list indices dropped.
ALLOWED: dict[str, str] = {
    "name": "letters, digits, '_', '.' and '-', at most 64 characters, not starting with '.' or '-'",
    "head_dim": ", ".join(map(str, HEAD_DIMS)),
    "dtype": _values(DType),
    "mask": f"a preset ({', '.join(k.value for k in MaskKind if k is not MaskKind.expr)}), "
            "{kind: sliding_window, window: [left, right]}, {kind: chunked, chunk: N} "
            "or {expr: \"...\", tensors: {...}}",
    "mask.kind": _values(MaskKind),
    "mask.window": "[left, right] with each side >= 0, or -1 for unbounded",
    "mask.chunk": "a positive integer (the chunk length in tokens)",
    "score_mod": "{softcap: c}, {alibi: standard} or {alibi: runtime}, or {expr: \"...\", tensors: {...}}",
    "score_mod.softcap": "a positive number",
    "score_mod.alibi": "standard or runtime",
    "sinks": "none or learnable",
    "window": "[left, right] with each side >= 0, or -1 for unbounded",
    "arch": f"{_values(Arch)} (one, or a list)",
    "pipeline": f"{_values(PipelineKind)}, or {{kind: <one of those but auto>, stages: {MIN_STAGES}..{MAX_STAGES}}}",
    "pipeline.kind": _values(PipelineKind),
    "pipeline.stages": f"an integer from {MIN_STAGES} to {MAX_STAGES} (with a named kind, not auto)",
    "tiles": "a mapping with any of block_m, block_n, num_warps",
    "tiles.block_m": _tries("block_m"),
    "tiles.block_n": _tries("block_n"),
    "tiles.num_warps": _tries("num_warps") + "; the Hopper counts include the producer warpgroup",
    "deterministic": "true or false",
}

#: The model that validates the mapping at each YAML path (for "did you mean" on unknown keys).
MODELS: dict[str, type[BaseModel]] = {"": AttentionSpec, "pipeline": Pipeline, "tiles": Tiles}


class _Issue(NamedTuple):
    rank: int
    line: int | None
    path: str
    full_path: str
    message: str




def join_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = printable(key)
    return f"{path}.{key}" if path else key



def spec_error_from_validation(exc: ValidationError, source: str | None = None,
                               lines: Mapping[str, int] | None = None, prefix: tuple[str, ...] = ()) -> SpecError:
    """One SpecError for a pydantic ValidationError of AttentionSpec (or one of its parts).

    `lines` maps YAML paths ("", "mask", "window[1]", "pipeline.stages") to 1-based lines; the
    first problem (unknown keys first, then in document order, missing keys last) leads the
    message and the others follow it, one line each. `prefix` is the YAML path of the part that
    failed (("tiles",) for a Tiles), so that fields are named as in a spec.
    """
    issues = [_issue({**err, "loc": (*prefix, *err["loc"])}, lines) for err in exc.errors()]
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
    # A message with its own remedy already says what to use instead.
    said = "allowed" in message.lower() or "Remedy:" in message
    if allowed and kind not in ("extra_forbidden", "invalid_key") and not said:
        message += f"; allowed: {allowed}"
    if kind == "enum":
        message += _did_you_mean(err.get("input"), re.findall(r"'([^']*)'", str((err.get("ctx") or {})
                                                                              .get("expected", ""))))
    return _Issue(rank, line, path, full, message)


def _path_of(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path = join_path(path, part if isinstance(part, int) else str(part))
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
        return f"keys must be names (strings), got {short_repr(leaf)!r}"
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
    model = MODELS.get(_generic(parent))
    valid = list(model.model_fields) if model else []
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key '{short_repr(key)}'; did you mean '{close[0]}'?"
    listing = f"; valid keys: {', '.join(valid)}" if valid else ""
    return f"unknown key '{short_repr(key)}'{listing}"


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
        return f"the integer {short_repr(value)}"
    if isinstance(value, float):
        return f"the number {short_repr(value)}"
    if isinstance(value, str):
        return f"the string {short_repr(value)!r}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a value of type {type(value).__name__}"


def short_repr(value: Any, limit: int = 40) -> str:
    text = printable(str(value))
    return text if len(text) <= limit else text[:limit] + "..."


def printable(text: str) -> str:
    """Control characters escaped, so a hostile key cannot drive the terminal."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
