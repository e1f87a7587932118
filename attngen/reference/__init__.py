"""References the kernels are tested against: the block schedule (schedule.py) and NumPy interpreters of
the forward and backward tile loops (interp.py, interp_bwd.py)."""
