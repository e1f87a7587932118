"""Stage 3, the source: KernelPlan -> KernelSource through the Jinja templates (renderer.py), with the
C++ spellings of enums (cxx.py), the parameter blocks (abi.py) and wgmma's operands (wgmma.py)."""
