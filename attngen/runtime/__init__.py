"""Stage 5, the op: a Cubin loaded through the CUDA driver (driver.py) behind a torch.library op
(op.py): the forward (kernel.py), the backward (backward.py), TMA tensor maps (tma.py)."""
