"""Where attngen's own files live: the Jinja templates, in a checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def templates_dir() -> Path:
    """The CUDA templates: `attngen/templates` in a wheel, `<repo>/templates` in a checkout.

    The wheel copies the repository's `templates/` into the package (pyproject's force-include),
    so the packaged copy wins when both exist. ATTNGEN_TEMPLATES overrides both (env.py).
    """
    from .env import templates_override

    override = templates_override()
    if override is not None:
        return override
    packaged = PACKAGE_DIR / "templates"
    if packaged.is_dir():
        return packaged
    return PACKAGE_DIR.parent / "templates"
