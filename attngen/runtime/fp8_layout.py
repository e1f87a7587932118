"""V for the 8-bit wgmma forward: transposed, keys contiguous, in the key order the kernel packs P in.

wgmma reads 8-bit B operands K-major only, and the K of O += P V is the key: the kernel's V tiles are (head_dim,
keys) with the keys contiguous. Its P goes to the A operand without a shuffle, so lane t of a quad holds keys
{2t, 2t + 1, 8 + 2t, 9 + 2t} of each 16 in k slots 4t..4t + 3 (hopper_mainloop's pack_p). V's keys are stored in
that order: within every 16 keys, slot 4t + 2h + b holds key 8h + 2t + b. The sum over keys is the same in any
order, so the output is exact. The sequence is padded with zero keys to a multiple of 16 (TMA's strides are
multiples of 16 bytes, and the order is defined per 16); the kernel never gives padded keys a nonzero probability.

`transpose` runs the fp8 forward cubin's own transpose entry point (templates/common/fp8_v_transpose.cuh.j2) on the
call's stream; `v_transposed` is the same layout in torch operations, the definition the tests hold it to.
"""

from __future__ import annotations

from typing import Any

#: Keys per group of the order above.
GROUP = 16


def padded_keys(keys: int) -> int:
    """Keys of the transposed V: `keys` rounded up to a multiple of GROUP."""
    return -(-keys // GROUP) * GROUP


def transpose(fn: Any, stream: int, v: Any) -> Any:
    """V transposed by the cubin's transpose entry point `fn` (a LoadedFunction) on `stream`: a new (batch, kv_heads,
    head_dim, padded keys) tensor of v's dtype. v's rows must be 16-byte aligned (the launcher's TMA check)."""
    import torch

    from .. import env
    from ..codegen.abi import VT_PARAMS, VT_TILE, struct_of
    from .driver import launch

    batch, keys, kv_heads, head_dim = v.shape
    padded = padded_keys(keys)
    vt = torch.empty((batch, kv_heads, head_dim, padded), dtype=v.dtype, device=v.device)
    if env.poison_outputs():
        vt.view(torch.uint8).fill_(0x7F)   # e4m3's NaN: a byte the kernel leaves unwritten shows
    params = struct_of(VT_PARAMS)(v=v.data_ptr(), vt=vt.data_ptr(), batch_stride=v.stride(0),
                                  row_stride=v.stride(1), head_stride=v.stride(2), keys=keys, padded_keys=padded,
                                  kv_heads=kv_heads)
    grid = (-(-padded // VT_TILE.keys), head_dim // VT_TILE.dims, batch * kv_heads)
    launch(fn, grid, VT_TILE.threads, stream, params)
    return vt


def transpose_for(kernel: Any, v: Any) -> Any:
    """transpose() with the transpose entry point of `kernel` (an fp8 sm90 AttentionKernel) on v's device and its
    current stream, as the kernel's calls run it."""
    import torch

    from ..codegen.abi import vt_entry
    from .device import current_arch

    arch = current_arch(v.device)
    fn = kernel._function(v.device.index or 0, arch).sibling(vt_entry(kernel.cubins[arch].source.plan.kernel_name))
    return transpose(fn, torch.cuda.current_stream(v.device).cuda_stream, v)


def v_transposed(v: Any) -> Any:
    """(batch, keys, kv_heads, head_dim) 8-bit `v` as a contiguous (batch, kv_heads, head_dim, padded keys) tensor
    of the same dtype, keys in the kernel's order (module docstring). One copy on v's device and stream."""
    import torch

    batch, keys, kv_heads, head_dim = v.shape
    padded = padded_keys(keys)
    raw = v.view(torch.uint8)
    if padded != keys:
        grown = raw.new_zeros((batch, padded, kv_heads, head_dim))
        grown[:, :keys] = raw
        raw = grown
    # keys = (group, h, t, b) with key 16 group + 8 h + 2 t + b; slots go (group, t, h, b).
    split = raw.reshape(batch, padded // GROUP, 2, 4, 2, kv_heads, head_dim)
    ordered = split.permute(0, 5, 6, 1, 3, 2, 4).contiguous()
    return ordered.reshape(batch, kv_heads, head_dim, padded).view(v.dtype)


def slot_keys() -> list[int]:
    """The key held by each of the 16 slots of a group (what v_transposed stores at slot s)."""
    return [8 * h + 2 * t + b for t in range(4) for h in range(2) for b in range(2)]
