"""The wgmma instructions a Hopper kernel uses, as the values its template spells into inline PTX.

One `WgmmaOp` per (N, A source, B major-ness); the template renders each as one C++ wrapper whose
operand list (N/2 fp32 accumulators per thread, then A, B and the scale-d predicate) comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass

#: M of every wgmma: 64 rows per warpgroup.
M = 64
#: N of wgmma.m64nNk16: a multiple of 8 from 8 to 256 (PTX ISA, "Matrix shape").
MIN_N, MAX_N, N_STEP = 8, 256, 8


@dataclass(frozen=True)
class WgmmaOp:
    n: int
    #: A (64 x 16) from registers (the P of O += P V) instead of a shared-memory descriptor.
    a_in_regs: bool
    #: B is MN-major in shared memory (V: head dim contiguous), transposed by the instruction.
    trans_b: bool
    #: A (from shared memory) is M-major, transposed by the instruction.
    trans_a: bool = False
    #: K of one instruction: the element type's MMA k-width (features/dtype.py; 16 for 16-bit types).
    k: int = 16

    def __post_init__(self) -> None:
        if not (MIN_N <= self.n <= MAX_N and self.n % N_STEP == 0):
            raise ValueError(f"wgmma N must be a multiple of {N_STEP} in [{MIN_N}, {MAX_N}], got {self.n}")
        if self.trans_a and self.a_in_regs:
            raise ValueError("an A operand in registers is K-major: it cannot be transposed")
        if self.k != 16 and (self.trans_a or self.trans_b):
            raise ValueError(f"wgmma k{self.k} (8-bit operands) takes K-major operands only: no transpose")

    @property
    def name(self) -> str:
        return (f"wgmma_m64n{self.n}k{self.k}_{'rs' if self.a_in_regs else 'ss'}{'_ta' if self.trans_a else ''}"
                f"{'_tb' if self.trans_b else ''}")

    @property
    def _acc(self) -> int:
        return self.n // 2  # fp32 accumulator registers per thread

    @property
    def d_list(self) -> str:
        return "{" + ", ".join(f"%{i}" for i in range(self._acc)) + "}"

    @property
    def a_list(self) -> str:
        base = self._acc
        if self.a_in_regs:
            return "{" + ", ".join(f"%{base + i}" for i in range(4)) + "}"
        return f"%{base}"

    @property
    def b_operand(self) -> int:
        return self._acc + (4 if self.a_in_regs else 1)

    @property
    def scale_operand(self) -> int:
        return self.b_operand + 1

    @property
    def trans_tail(self) -> str:
        """imm-trans-a (descriptor form only) and imm-trans-b; 8-bit forms (k32) have neither."""
        if self.k != 16:
            return ""
        tb = int(self.trans_b)
        return f", {tb}" if self.a_in_regs else f", {int(self.trans_a)}, {tb}"

    @property
    def a_param(self) -> str:
        return "const u32 (&a)[4]" if self.a_in_regs else "u64 desc_a"

    @property
    def d_constraints(self) -> str:
        return ", ".join(f'"+f"(d[{i // 4}][{i % 4}])' for i in range(self._acc))

    @property
    def in_constraints(self) -> str:
        a = ", ".join(f'"r"(a[{i}])' for i in range(4)) if self.a_in_regs else '"l"(desc_a)'
        return f'{a}, "l"(desc_b), "r"(scale_d)'


def backward_ops(block_m: int, head_dim: int, dq_cols: int, k: int) -> tuple[WgmmaOp, ...]:
    """The Hopper dK/dV kernel's instructions: S^T = K Q^T and dP^T = V dO^T (64 KV rows x block_m
    queries, both K-major); dV += P^T dO and dK += dS^T Q (A in registers, or K-major in shared
    memory; B MN-major); the dQ partial dS K (A = dS^T from shared memory, M-major; B = K, MN-major)."""
    return (WgmmaOp(block_m, a_in_regs=False, trans_b=False, k=k), WgmmaOp(head_dim, a_in_regs=True, trans_b=True, k=k),
            WgmmaOp(head_dim, a_in_regs=False, trans_b=True, k=k),
            WgmmaOp(dq_cols, a_in_regs=False, trans_b=True, trans_a=True, k=k))


def attention_ops(block_n: int, head_dim: int, k: int, v_transposed: bool = False) -> tuple[WgmmaOp, WgmmaOp]:
    """S = Q K^T (both operands K-major in shared memory) and O += P V (P in registers; V MN-major, or K-major when
    it is stored transposed, as 8-bit V is)."""
    return (WgmmaOp(block_n, a_in_regs=False, trans_b=False, k=k),
            WgmmaOp(head_dim, a_in_regs=True, trans_b=not v_transposed, k=k))
