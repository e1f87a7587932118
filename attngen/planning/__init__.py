"""Stage 2, the plan: AttentionSpec -> KernelPlan / BwdPlan (ir.py) within each arch's budget (archs.py):
the tilings each pipeline tries (search_space.py), the forward planner's loop over the kernel families
(planner.py; each family's budget and cost model lives in attngen/families/) and the backward's
(planner_bwd.py)."""
