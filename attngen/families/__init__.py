"""The kernel families, in one explicit registry: a new family is a module here and a line in FAMILIES.

    registry()                every family, in FAMILIES' order
    get(name)                 one by name
    serving(spec, arch, dir)  the families of one direction that serve spec on arch, with why the others do not
"""

from __future__ import annotations

from functools import lru_cache
from importlib import import_module
from typing import TYPE_CHECKING

from .base import Coverage, Direction, KernelFamily

if TYPE_CHECKING:
    from ..spec.model import Arch, AttentionSpec

#: Module and class of each family, in the order ties between families go (a faster path first).
FAMILIES: tuple[tuple[str, str], ...] = (
    ("sm90_fwd", "Sm90Forward"),
    ("sm80_fwd", "Sm80Forward"),
    ("sm90_bwd", "Sm90Backward"),
    ("sm80_bwd", "Sm80Backward"),
    ("sm80_decode", "Sm80Decode"),
)

__all__ = ["Coverage", "Direction", "KernelFamily", "get", "registry", "serving"]


@lru_cache(maxsize=1)
def registry() -> tuple[KernelFamily, ...]:
    """One instance of every family (their modules load on the first call, never at import)."""
    out = []
    for module, cls in FAMILIES:
        family = getattr(import_module(f"{__name__}.{module}"), cls)()
        assert family.name == module, f"family {cls} in {module}.py is named {family.name!r}"
        out.append(family)
    return tuple(out)


def get(name: str) -> KernelFamily:
    for family in registry():
        if family.name == name:
            return family
    known = ", ".join(f.name for f in registry())
    raise KeyError(f"no kernel family '{name}'; the families are {known}")


def serving(spec: AttentionSpec, arch: Arch,
            direction: Direction) -> tuple[list[KernelFamily], dict[str, str]]:
    """The families of `direction` that serve `spec` on `arch` (registry order), and for each of the others
    why it does not."""
    chosen: list[KernelFamily] = []
    refused: dict[str, str] = {}
    for family in registry():
        if family.direction is not direction:
            continue
        why = family.serves(spec, arch)
        if why is None:
            chosen.append(family)
        else:
            refused[family.name] = why
    return chosen, refused
