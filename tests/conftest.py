"""Shared fixtures: spec files in a temporary directory, and checks that a SpecError points at a field."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from attngen.errors import SpecError
from attngen.spec.loader import load_spec

# Property tests draw the same examples on every run unless HYPOTHESIS_PROFILE=explore: a CI run
# is reproducible, and exploring for new counterexamples is a deliberate act.
settings.register_profile("repro", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repro"))


@pytest.fixture
def spec_file(tmp_path: Path) -> Callable[..., Path]:
    """Write YAML text to a file and return its path."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def spec_error(spec_file: Callable[..., Path]) -> Callable[..., SpecError]:
    """Load `text` from a file; assert a SpecError that names the file, `line`, `path` and `needles`."""

    def check(text: str, line: int | None, path: str | None, *needles: str) -> SpecError:
        file = spec_file(text)
        with pytest.raises(SpecError) as caught:
            load_spec(file)
        err = caught.value
        message = str(err)
        assert err.source == str(file)
        assert (err.line, err.path) == (line, path), message
        where = f"{file}:{line}: " if line is not None else f"{file}: "
        assert message.startswith(where + (f"{path}: " if path else "")), message
        for needle in needles:
            assert needle in message, f"{needle!r} not in {message!r}"
        return err

    return check


@pytest.fixture(autouse=True, scope="session")
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Compiled kernels go to a cache of this test session unless ATTNGEN_CACHE_DIR names one."""
    if os.environ.get("ATTNGEN_CACHE_DIR"):
        yield
        return
    os.environ["ATTNGEN_CACHE_DIR"] = str(tmp_path_factory.mktemp("attngen-cache"))
    yield
    del os.environ["ATTNGEN_CACHE_DIR"]
