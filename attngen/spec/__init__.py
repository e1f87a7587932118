"""Stage 1, the spec: `AttentionSpec` (model.py, pydantic), loaded from YAML with line-accurate errors
(loader.py, messages.py)."""
