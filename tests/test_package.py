"""The package itself: what `import attngen` loads, the lazy names, the version."""

from __future__ import annotations

import subprocess
import sys

import attngen

HEAVY = ("pydantic", "jinja2", "torch", "yaml", "cuda", "numpy", "typer", "rich")


def test_import_loads_nothing_heavy() -> None:
    code = ("import sys, attngen; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "", f"import attngen loaded {loaded}"


def test_dir_lists_the_lazy_names() -> None:
    names = dir(attngen)
    for name in ("build", "render", "compile", "plan", "load_spec", "AttentionSpec", "SpecError", "__version__"):
        assert name in names


def test_functions_survive_their_modules_import() -> None:
    """`attngen.build` and `attngen.render` stay the functions once their modules are imported."""
    code = ("import attngen, attngen.toolchain.builder, attngen.codegen.renderer; "
            "print(callable(attngen.build), attngen.build.__module__, attngen.render.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "attngen.toolchain.builder", "attngen.codegen.renderer"]


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        attngen.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("attngen.no_such_name did not raise")
