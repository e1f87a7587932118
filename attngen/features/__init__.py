"""Feature traits: one axis of the spec each, as the kernels take it.

A trait supplies its template values (or a C++ struct the kernel takes as a type parameter), its runtime
parameters, its NumPy reference for the interpreters and its numbers for the cost models:
mask.py (which keys a query sees), dtype.py (the element type: its spellings, size, MMA k-width and TMA
type), kv_layout.py (where K and V rows live: dense today). Families list the traits they serve in their
coverage and refuse a spec with any other (`KernelFamily.trait_refusal`); a new mask kind is a trait and
its template snippet, and nothing generic.
"""
