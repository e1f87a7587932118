"""Float64 reference of the fp8 forward and FA3's accuracy report (RMSE against float64 on inputs with outliers)."""

from __future__ import annotations

import math

import torch

from tests.gpu_reference import reference


def dequantized(x: torch.Tensor, descale: torch.Tensor) -> torch.Tensor:
    """An e4m3 tensor (b, s, kv_heads, d) times its (b, kv_heads) descale factors, in float64."""
    return x.double() * descale.double()[:, None, :, None]


def fp8_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor,
                  k_descale: torch.Tensor, v_descale: torch.Tensor, left: int, right: int,
                  scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 attention of the dequantized inputs (q's descale is per kv head: each q head uses its group's)."""
    group = q.shape[2] // k.shape[2]
    qd = q.double() * q_descale.double().repeat_interleave(group, dim=1)[:, None, :, None]
    return reference(qd, dequantized(k, k_descale), dequantized(v, v_descale), left, right, scale)


def with_outliers(shape: tuple[int, ...], frac: float = 1e-3, factor: float = 10.0, *,
                  generator: torch.Generator | None = None, device: str = "cuda") -> torch.Tensor:
    """Standard normal float32 values, a fraction `frac` of them `factor` times larger (FA3's accuracy inputs)."""
    x = torch.randn(shape, generator=generator, device=device)
    hit = torch.rand(shape, generator=generator, device=device) < frac
    return torch.where(hit, x * factor, x)


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-(batch, head) e4m3 quantization: (x / s) in e4m3 and s = amax / 448 of shape (b, heads)."""
    amax = x.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    s = (amax / 448.0).float()
    return (x / s[:, None, :, None]).to(torch.float8_e4m3fn), s


def rmse(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Root mean square error against the float64 reference; inf when out holds NaN or inf (NaN never passes)."""
    o = out.double()
    if not torch.isfinite(o).all():
        return math.inf
    return float(((o - ref) ** 2).mean().sqrt())
