"""The variant of a spec: its mask, score mod and sinks together, as the kernels and the runtime see them.

`variant_of(spec)` gathers the three traits. For the kernels it gives the C++ of one `Variant<Params>`
struct (templates/features/variant.cuh.j2): the element test, the tile classifier, the score mod and its
derivative, all emitted from the expressions; and the parameter-block fields of the runtime tensors and
scalars. For the runtime it lists the keyword arguments a call takes (`RuntimeArg`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codegen.abi import Field
from ..spec.model import AttentionSpec
from ..spec.variant import ScalarDecl, TensorDecl
from .mask import MaskTrait, mask_trait
from .score_mod import SINKS, ScoreModTrait, SinksTrait, score_mod_trait, sinks_trait

#: How the emitted C++ spells each name of the language (members of the Variant struct).
CXX_NAMES = {"b": "b", "h": "h", "q_idx": "q_idx", "kv_idx": "kv_idx", "sq": "sq", "sk": "sk", "score": "score"}
#: The C++ spelling of each declared dtype, and each symbolic dim's parameter-block field.
CXX_DTYPES = {"int32": "int", "fp32": "float"}
CXX_DIMS = {"batch": "p.var_batch", "heads": "p.heads", "kv_heads": "p.kv_heads", "seqlen_q": "p.seqlen_q",
            "seqlen_k": "p.seqlen_k"}
#: Block granularity of a mask tensor's min/max summary (the per-call pre-pass), along its last dim.
SUMMARY_BLOCK = 64


@dataclass(frozen=True)
class RuntimeArg:
    """A keyword argument of the kernel: a declared tensor or scalar (or one attngen computes)."""

    name: str
    decl: TensorDecl | ScalarDecl
    #: Read by the mask's tile classifier over ranges of indices: the call also passes its min/max summary.
    summarized: bool = False
    #: attngen fills it from the call's shapes (ALiBi's standard slopes); not a keyword argument.
    computed: bool = False
    #: Its gradient is computed (sinks); any other float tensor that requires grad is refused.
    differentiable: bool = False

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.decl, TensorDecl)


@dataclass(frozen=True)
class Variant:
    mask: MaskTrait
    score_mod: ScoreModTrait | None
    sinks: SinksTrait | None

    @property
    def name_part(self) -> str:
        parts = [self.mask.name_part]
        parts += [t.name_part for t in (self.score_mod, self.sinks) if t is not None]
        return "_".join(parts)

    @property
    def is_plain(self) -> bool:
        """No score mod, no sinks, no runtime argument: the kernels' parameter blocks are the plain ones."""
        return self.score_mod is None and self.sinks is None and not self.arguments()

    def arguments(self) -> tuple[RuntimeArg, ...]:
        """Every runtime tensor and scalar, in parameter-block order (mask's, score mod's, sinks)."""
        args: dict[str, RuntimeArg] = {}
        summarized = _summarized(self.mask)
        for trait in (self.mask, self.score_mod):
            if trait is None:
                continue
            computed: frozenset[str] = getattr(trait, "computed", frozenset())
            for name, decl in trait.tensors.items():
                args[name] = RuntimeArg(name, decl, summarized=name in summarized, computed=name in computed)
            for name, sdecl in trait.scalars.items():
                args[name] = RuntimeArg(name, sdecl)
        if self.sinks is not None:
            args[SINKS] = RuntimeArg(SINKS, self.sinks.decl, differentiable=True)
        return tuple(args.values())

    def param_fields(self) -> tuple[Field, ...]:
        """The fields the kernels' parameter blocks gain (appended after the plain ones)."""
        import ctypes

        fields: list[Field] = []
        args = self.arguments()
        if any("batch" in a.decl.shape for a in args if isinstance(a.decl, TensorDecl)):
            fields.append(Field("var_batch", "int", ctypes.c_int32))
        for arg in args:
            if isinstance(arg.decl, TensorDecl):
                fields.append(Field(f"var_{arg.name}", f"const {CXX_DTYPES[arg.decl.dtype]}*", ctypes.c_void_p))
                if arg.summarized:
                    fields.append(Field(f"var_{arg.name}_blk", f"const {CXX_DTYPES[arg.decl.dtype]}*",
                                        ctypes.c_void_p))
            else:
                py = ctypes.c_int32 if arg.decl.dtype == "int32" else ctypes.c_float
                fields.append(Field(f"var_{arg.name}", CXX_DTYPES[arg.decl.dtype], py))
        return tuple(fields)


def _summarized(mask: MaskTrait) -> frozenset[str]:
    """The mask tensors some access of which is indexed by q_idx or kv_idx (a range over a tile)."""
    tree = mask.parsed()
    if tree is None:
        return frozenset()
    from .. import expr as lang

    return frozenset(name for name in mask.tensors if lang.indexed_by_range(tree, name, ("q_idx", "kv_idx")))


def variant_of(spec: AttentionSpec) -> Variant:
    return Variant(mask_trait(spec), score_mod_trait(spec), sinks_trait(spec))


def params_with_variant(fields: tuple[Field, ...], spec: AttentionSpec) -> tuple[Field, ...]:
    """A family's parameter-block fields with the spec's variant fields appended (the plain fields alone for
    a plain spec)."""
    from ..codegen.abi import with_variant

    return with_variant(fields, variant_of(spec).param_fields())
