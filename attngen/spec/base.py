"""The base of every spec model: frozen, unknown keys forbidden, errors in the loader's words."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError
from typing_extensions import Self

from ..errors import SpecError


class Frozen(BaseModel):
    """Frozen, unknown keys forbidden; a failed validation from Python is a SpecError in the loader's words
    (field path, what is allowed) rather than pydantic's ValidationError."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)
    #: Where this model sits in a spec ("tiles"), so that errors name fields as the YAML does.
    _spec_path: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _readable(exc, type(self)._spec_path) from None

    # Only reword errors: pydantic keeps validating nested models itself, rather than through this
    # __init__ (as it does for RootModel's), so each error is reworded once and keeps its location.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        try:
            return super().model_validate(obj, **options)
        except ValidationError as exc:
            raise _readable(exc, cls._spec_path) from None

    @classmethod
    def pydantic_validate(cls, obj: Any) -> Self:
        """pydantic's own model_validate, raising its ValidationError (the loader maps that to YAML lines)."""
        return super().model_validate(obj)


def _readable(exc: ValidationError, path: tuple[str, ...]) -> SpecError:
    from .messages import spec_error_from_validation

    return spec_error_from_validation(exc, prefix=path)
