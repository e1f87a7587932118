"""Machine code of a cubin (SASS), through cuobjdump and nvdisasm from pip packages.

Used to check that a kernel really runs on the instructions its plan names (HMMA for mma.sync,
LDSM for ldmatrix, LDGSTS for cp.async) and never touches local memory (LDL/STL).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from ..errors import AttngenError

_OPCODE = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)", re.MULTILINE)
_FUNCTION = re.compile(r"^\s*Function : (\S+)", re.MULTILINE)


def _tool(name: str) -> str:
    try:
        import cuda.pathfinder as pathfinder

        path = pathfinder.find_nvidia_binary_utility(name)
    except Exception:  # pathfinder raises its own errors for packages it cannot find
        path = None
    if not path:
        raise AttngenError(f"{name} was not found; install it with: pip install nvidia-cuda-{name}")
    return str(path)


def disassemble(cubin: bytes) -> str:
    """The SASS listing of every kernel in `cubin`."""
    cuobjdump, nvdisasm = _tool("cuobjdump"), _tool("nvdisasm")
    env = dict(os.environ, PATH=f"{Path(nvdisasm).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with tempfile.TemporaryDirectory(prefix="attngen-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        done = subprocess.run([cuobjdump, "--dump-sass", str(path)], capture_output=True, text=True, env=env,
                              check=False)
    if done.returncode != 0:
        raise AttngenError(f"cuobjdump could not disassemble the cubin: {done.stderr.strip()}")
    return done.stdout


def opcodes(sass: str) -> Counter[str]:
    """Static count of each opcode (without modifiers: HMMA.16816.F32.BF16 counts as HMMA)."""
    return Counter(m.group(1) for m in _OPCODE.finditer(sass))


def kernel_opcodes(sass: str) -> dict[str, list[str]]:
    """Each kernel's opcodes (without modifiers) in program order, by the kernel's name."""
    heads = list(_FUNCTION.finditer(sass))
    ends = [h.start() for h in heads[1:]] + [len(sass)]
    return {h.group(1): [m.group(1) for m in _OPCODE.finditer(sass, h.end(), end)]
            for h, end in zip(heads, ends, strict=True)}
