"""The one error the expression language raises: where in the expression, what was found, what is allowed."""

from __future__ import annotations

from ..errors import SpecError


class ExprError(SpecError):
    """An expression is malformed, mistyped or cannot be evaluated.

    `expr_line` and `expr_column` (1-based) locate the offending part inside the expression text; the
    `line` of SpecError stays the line of the spec file, which the spec loader fills in.
    """

    def __init__(self, message: str, *, expr_line: int | None = None, expr_column: int | None = None,
                 source: str | None = None, line: int | None = None, path: str | None = None) -> None:
        self.expr_line = expr_line
        self.expr_column = expr_column
        if expr_line is not None and expr_column is not None:
            message = f"line {expr_line}, column {expr_column}: {message}"
        super().__init__(message, source=source, line=line, path=path)
