"""A forward call as the forward families receive it, and the parameter block every forward kernel reads, split
into the part a call's geometry fixes (written once into a runtime.prepared.ParamTemplate) and the part each call
writes (pointers, scale, sequences, variant arguments)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..codegen.abi import Field, set_strides, struct_of
from .prepared import CallGeometry, ParamTemplate
from .seqlens import Seqlens
from .variant_args import VariantArgs


@dataclass
class FwdCall:
    """One forward call: q, k, v, out and the LSE as Seqlens.entries gives them, the scale, the variant's
    prepared arguments (with a descaled call's factors) and the sequences."""

    q: Any
    k: Any
    v: Any
    out: Any
    lse: Any
    softmax_scale: float
    args: VariantArgs
    seqs: Seqlens

    def geometry(self) -> CallGeometry:
        """The key of this call's ready launch (runtime.prepared)."""
        return CallGeometry.of((self.q, self.k, self.v, self.out, self.lse), self.seqs, self.args)


def param_template(fields: tuple[Field, ...], call: FwdCall) -> ParamTemplate:
    """The part of a family's forward parameter block (of `fields`, the variant's included) that calls like `call`
    share: sizes and strides; `call_fields` writes the rest (family-specific fields, TMA maps, are the family's)."""
    params = struct_of(fields)()
    shape_fields(params, call)
    return ParamTemplate(params)


def shape_fields(params: Any, call: FwdCall) -> None:
    """Sizes and strides."""
    q, k = call.q, call.k
    params.seqlen_q, params.seqlen_k, params.heads, params.kv_heads = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    set_strides(params, q=q, k=k, v=call.v, o=call.out)


def call_fields(params: Any, call: FwdCall, order: bool = True) -> None:
    """The pointers, the scale, the sequences (Seqlens.fill, with `order`) and the variant's arguments."""
    params.q, params.k, params.v = call.q.data_ptr(), call.k.data_ptr(), call.v.data_ptr()
    params.o, params.lse = call.out.data_ptr(), call.lse.data_ptr()
    params.scale_log2 = call.softmax_scale * math.log2(math.e)
    call.seqs.fill(params, order=order)
    call.args.fill(params)
