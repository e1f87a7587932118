"""The errors users see. Each carries what went wrong, where, and a remedy."""

from __future__ import annotations

import sys
from typing import Any


class AttngenError(Exception):
    """Base of every error attngen raises on purpose."""


class SpecError(AttngenError, ValueError):
    """A spec is malformed or asks for something unsupported.

    `location` is "file:line" when the spec came from YAML; `path` is the YAML path of the
    offending field ("mask", "window[1]", "pipeline.stages").
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 path: str | None = None) -> None:
        self.source = source
        self.line = line
        self.path = path
        self.detail = message
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line is not None else f"{source}: "
        field = f"{path}: " if path else ""
        super().__init__(f"{where}{field}{message}")


class PlanError(AttngenError):
    """No tiling of the spec fits the arch's budget (the message gives the arithmetic)."""


class CompileError(AttngenError):
    """NVRTC rejected the generated source. Carries the log, the saved source path and a repro."""

    def __init__(self, message: str, *, log: str = "", source_path: str | None = None,
                 repro: str | None = None) -> None:
        self.log = log
        self.source_path = source_path
        self.repro = repro
        parts = [message]
        if source_path:
            parts.append(f"source saved at {source_path}")
        if repro:
            parts.append(f"reproduce with: {repro}")
        if log:
            parts.append("NVRTC log:\n" + log.strip())
        super().__init__("\n".join(parts))


class LaunchError(AttngenError):
    """The CUDA driver refused to load or launch a kernel."""


class DeviceCheckError(AttngenError, ValueError):
    """An earlier call's kernels found a value the host did not read (a KV cache's lengths or block table) out of
    range: its outputs were NaN (runtime.device_checks)."""


class OutputError(AttngenError):
    """The output folder of a build cannot be used (an empty name, a file, not writable)."""


def show_warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: Any = None, line: str | None = None) -> None:
    """A `warnings.showwarning` for the command line: `warning: <message>`, one line, without the Python
    source line that raised it."""
    (file or sys.stderr).write(f"warning: {message}\n")
