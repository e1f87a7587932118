"""Stage 3, the source: KernelPlan -> KernelSource through the Jinja templates (renderer.py), with the
parameter blocks (abi.py) and wgmma's operands (wgmma.py); the element types' C++ and PTX spellings are
the dtype trait's (attngen/features/dtype.py)."""
