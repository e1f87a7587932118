"""The side-by-side forward benchmark: attngen against torch SDPA and FlexAttention on one GPU.

    python -m attngen.bench --quick          # or: attngen bench --quick

Modules: `model` (the settings grid, FLOP and IO-model arithmetic, roofline; pure Python),
`measure` (inputs, the float64 reference, timing, ceilings, environment), `peers` (the
implementations), `runner` (the loop), `report` (JSON, markdown, plot, terminal table),
`output` (where results go), `command` (the command line). Importing this package loads neither torch nor triton.
"""

from __future__ import annotations
