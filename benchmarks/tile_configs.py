"""A tiling named on a benchmark's command line: `<pipeline>[:<stages>][/<block_m>x<block_n>]` (or `auto`), as the
spec fields `pipeline` and `tiles` (fp8_sweep.py's configurations, bwd_interleaved.py's `attngen@...` kinds)."""

from __future__ import annotations


def spec_fields(config: str) -> dict[str, object]:
    """The AttentionSpec fields of `config`: "pingpong:3/128x256" -> pipeline pingpong with 3 stages, tiles 128 x 256.
    Empty for "" and "auto"."""
    config, _, tiles = config.partition("/")
    kind, _, stages = config.partition(":")
    fields: dict[str, object] = {}
    if kind and kind != "auto":
        fields["pipeline"] = kind if not stages else {"kind": kind, "stages": int(stages)}
    if tiles:
        block_m, _, block_n = tiles.partition("x")
        fields["tiles"] = {"block_m": int(block_m), "block_n": int(block_n)}
    return fields
