"""Files and folders that appear whole or not at all, with the permissions the umask gives.

Everything attngen writes (build outputs, cache entries, the rendered catalogue) goes through here:
data is written under a temporary name in the destination's own folder, then renamed into place with
`os.replace`, so a reader (or a build killed half-way) never sees a half-written file. Temporary
names are created with `os.open(..., 0o666)` and `os.mkdir(..., 0o777)`, so the process umask decides
the final mode as it does for any other build tool (tempfile's 0600 / 0700 would not).
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Prefix of every temporary name; a folder listing can tell them from finished entries.
TEMP_PREFIX = ".tmp-"


def temp_name(parent: Path, label: str) -> Path:
    """A fresh name in `parent` for a temporary file or folder (pid and random bits: no collisions)."""
    return parent / f"{TEMP_PREFIX}{label}-{os.getpid()}-{secrets.token_hex(4)}"


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`."""
    tmp = temp_name(path.parent, path.name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def staged_dir(target: Path, label: str) -> Iterator[Path]:
    """A temporary folder beside `target` to fill; on success it replaces `target` in one rename.

    An existing `target` is removed just before the rename. On any exception (an interrupt included)
    the temporary folder is deleted and `target` is left as it was.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(target.parent, label)
    os.mkdir(tmp, 0o777)
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
