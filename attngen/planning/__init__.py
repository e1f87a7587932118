"""Stage 2, the plan: AttentionSpec -> KernelPlan / BwdPlan (ir.py) within each arch's budget (archs.py):
the tilings each pipeline tries (search_space.py), their budgets and cost models (planner.py,
planner_hopper.py, planner_bwd.py)."""
