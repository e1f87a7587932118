"""What an element type allows of the rest of a spec: the fp8 forward's limits, as one function the spec's
validator calls (the facts come from the dtype trait, attngen/features/dtype.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import AttentionSpec


def dtype_refusal(spec: AttentionSpec) -> str | None:
    """Why the spec's dtype cannot serve the rest of the spec (field, what is allowed, a remedy); None when it can."""
    from ..features.dtype import dtype_trait
    from ..planning.search_space import HOPPER_ARCHS
    from .model import HEAD_DIMS, SeqlensKind

    trait = dtype_trait(spec.dtype)
    name = trait.name
    if not trait.backward and spec.deterministic:
        return (f"deterministic: true asks for bitwise-reproducible gradients, but dtype {name} is forward only "
                f"(no backward kernels). Remedy: drop 'deterministic', or use dtype bf16 or fp16 for training")
    if trait.descaled and spec.seqlens is not SeqlensKind.fixed:
        return (f"seqlens: {spec.seqlens.value} is not built for dtype {name} (its forward takes dense "
                f"(batch, seqlen, heads, head_dim) tensors only; no packed sequences or KV caches yet). "
                f"Remedy: use seqlens: fixed, or dtype bf16 or fp16")
    native = trait.mma_sync_archs
    if native is not None:
        allowed = (*native, *HOPPER_ARCHS) if trait.wgmma_row_bytes else native
        others = [a.value for a in spec.arch or () if a.value not in allowed]
        if others:
            return (f"arch lists {', '.join(others)}, where no kernel family runs {name} yet (mma.sync has no native "
                    f"{name} form there); dtype {name} allows {', '.join(native)} (mma.sync) and "
                    f"{', '.join(HOPPER_ARCHS)} (wgmma). Remedy: drop those arches, or use dtype bf16 there")
    if trait.row_multiple and spec.head_dim * trait.size % trait.row_multiple:
        allowed_dims = ", ".join(str(d) for d in HEAD_DIMS if d * trait.size % trait.row_multiple == 0)
        return (f"head_dim {spec.head_dim} gives {name} rows of {spec.head_dim * trait.size} B, not a multiple of "
                f"the {trait.row_multiple}-byte swizzle group; dtype {name} allows head_dim {allowed_dims}. Remedy: "
                f"pad the head dim, or use dtype bf16")
    if trait.descaled and spec.tiles and spec.tiles.block_n and spec.tiles.block_n % trait.mma_k:
        return (f"tiles.block_n {spec.tiles.block_n} is not a multiple of {trait.mma_k}, the keys of one {name} "
                f"P V step (k{trait.mma_k}). Remedy: pick a multiple of {trait.mma_k}")
    return _wgmma_refusal(spec)


def _wgmma_refusal(spec: AttentionSpec) -> str | None:
    """Why a spec that targets the wgmma kernels (an sm90 arch or a Hopper pipeline) cannot use them for its dtype."""
    from ..features.dtype import dtype_trait
    from ..planning.search_space import HOPPER_ARCHS
    from .model import HEAD_DIMS

    trait = dtype_trait(spec.dtype)
    hopper = spec.pipeline.kind.is_hopper or any(a.value in HOPPER_ARCHS for a in spec.arch or ())
    row = spec.head_dim * trait.size
    if not (hopper and trait.wgmma_row_bytes and row % trait.wgmma_row_bytes):
        return None
    allowed = ", ".join(str(d) for d in HEAD_DIMS if d * trait.size % trait.wgmma_row_bytes == 0)
    target = (f"pipeline '{spec.pipeline.kind.value}'" if spec.pipeline.kind.is_hopper
              else f"arch {', '.join(HOPPER_ARCHS)}")
    return (f"head_dim {spec.head_dim} gives {trait.name} rows of {row} B; {target} runs {trait.name} on wgmma, whose "
            f"8-bit tiles are whole {trait.wgmma_row_bytes}-byte swizzle rows: head_dim {allowed}. Remedy: pad the "
            f"head dim to one of those, or build for {', '.join(trait.mma_sync_archs or ())} (mma.sync)")
