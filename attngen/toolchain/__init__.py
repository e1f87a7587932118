"""Stage 4, the cubin: KernelSource -> Cubin with NVRTC (compiler.py), cached by content (cache.py),
built ahead of time with manifests (builder.py); artifacts.py holds the stage types, sass.py reads the
machine code."""
