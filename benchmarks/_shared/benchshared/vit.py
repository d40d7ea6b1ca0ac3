"""A Vision Transformer in plain torch, for images (2D patches) and videos (3D tubelets),
shared by the DINOv2 and V-JEPA benchmarks.

Why plain torch: the real stacks (facebookresearch's dinov2 and jepa repositories) are not
on the package registries, and what the standard suite measures is their computational
shape: pre-norm transformer blocks over patch tokens, `scaled_dot_product_attention`
(flash attention on GPUs), MLP or SwiGLU feed-forward, and the training-time options
those repositories use: DINOv2's stochastic depth (each residual branch computed for a
random subset of the batch, `residual`), layer scale, a learned mask token (iBOT), and
optional activation checkpointing. The published shapes are `ARCHES` (ViT-g/14:
DINOv2's giant; ViT-H/16: V-JEPA's encoder in upstream milabench; ViT-L). torch is
imported lazily (benchshared's rule: this module imports with the standard library).
"""

from __future__ import annotations

import functools
from typing import Any

#: name -> (embed dim, depth, heads, feed-forward hidden, SwiGLU)
ARCHES = {
    "giant": (1536, 40, 24, 4096, True),  # ViT-g/14 as DINOv2 trains it (SwiGLU 4096)
    "huge": (1280, 32, 16, 5120, False),  # ViT-H/16 (jepa's vit_huge)
    "large": (1024, 24, 16, 4096, False),  # ViT-L
    "small": (384, 12, 6, 1536, False),  # ViT-S (V-JEPA's predictor is 384 wide)
    "tiny": (64, 2, 2, 128, False),
}


def kept_samples(batch: int, drop_path: float) -> int:
    """Samples of a batch of ``batch`` that a residual branch computes under DINOv2's
    stochastic depth at rate ``drop_path`` (``max(int(batch x (1 - rate)), 1)``; all of
    them at rate 0)."""
    if drop_path <= 0:
        return batch
    return max(int(batch * (1 - drop_path)), 1)


def build_vit(
    arch: str,
    *,
    patch: int,
    in_chans: int = 3,
    tubelet: int = 1,
    checkpointing: bool = False,
    max_tokens: int = 4096,
    cls_token: bool = False,
    heads: int | None = None,
    drop_path: float = 0.0,
    layer_scale: float | None = None,
    mask_token: bool = False,
    chunks: int = 1,
    depth: int | None = None,
) -> Any:
    """A ViT encoder: patch (or tubelet) embedding, learned positions, an optional CLS
    token, blocks, final norm. ``forward(images, keep=None, masks=None)`` returns token
    features ``[B, (1 +) N, D]``.

    Positions: with a CLS token (DINOv2), ``1 + max_tokens`` of them, ``max_tokens`` a
    square grid; crops of another size get the grid's positions resized bicubically, as
    DINOv2's ``interpolate_pos_encoding`` does. Without (video), the first N. ``keep``:
    token indices (``[K]``, or ``[B, K]`` per sample) on which the blocks run (masked
    modelling: the context encoder sees the visible tokens). ``masks``: ``[B, N]``
    booleans, patches replaced by the learned mask token (``mask_token``: DINOv2's iBOT
    masking). ``heads`` overrides the arch's head count (V-JEPA's predictor takes the
    encoder's). ``drop_path`` and ``layer_scale``: see `Block.residual`. ``chunks``: the
    blocks grouped in that many `Chunk` modules (DINOv2's ``block_chunks``: its FSDP
    units). ``depth``: that many blocks instead of the arch's (the shallow copies of the
    memory estimates and FLOP counts, `benchkit.memory.by_depth`). ``images`` may be a
    list (DINOv2's student gets its global and local crops together, ``masks`` a list
    beside them): the output is then a list too."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    dim, arch_depth, arch_heads, hidden, swiglu = ARCHES[arch]
    depth = arch_depth if depth is None else depth
    heads = heads or arch_heads

    class FeedForward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.swiglu = swiglu
            self.fc1 = nn.Linear(dim, 2 * hidden if swiglu else hidden)
            self.fc2 = nn.Linear(hidden, dim)

        def forward(self, x: Any) -> Any:
            h = self.fc1(x)
            if self.swiglu:
                return swiglu_out(h, self.fc2.weight, self.fc2.bias)
            return self.fc2(F.gelu(h))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(dim, eps=1e-6)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.norm2 = nn.LayerNorm(dim, eps=1e-6)
            self.mlp = FeedForward()
            self.drop_path = drop_path
            self.ls1 = self.ls2 = None
            if layer_scale:
                self.ls1 = nn.Parameter(torch.full((dim,), float(layer_scale)))
                self.ls2 = nn.Parameter(torch.full((dim,), float(layer_scale)))

        def attention(self, x: Any) -> Any:
            b, n, _ = x.shape
            qkv = self.qkv(self.norm1(x)).view(b, n, 3, heads, dim // heads)
            q, k, v = qkv.unbind(2)
            att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                 v.transpose(1, 2))  # fmt: skip
            return self.proj(att.transpose(1, 2).reshape(b, n, dim))

        def feed_forward(self, x: Any) -> Any:
            return self.mlp(self.norm2(x))

        def residual(self, x: Any, branch: Any, gamma: Any) -> Any:
            """``x + gamma * branch(x)``. In training with ``drop_path`` > 0, DINOv2's
            stochastic depth (``drop_add_residual_stochastic_depth``): the branch runs
            on a random subset of `kept_samples` samples only, and its output is added
            to theirs scaled by batch / kept; the others skip it (no work)."""
            if not (self.training and self.drop_path > 0):
                r = branch(x)
                return x + (r * gamma if gamma is not None else r)
            b = x.shape[0]
            kept = kept_samples(b, self.drop_path)
            subset = torch.randperm(b, device=x.device)[:kept]
            r = branch(x[subset])
            if gamma is not None:
                r = r * gamma
            out = torch.index_add(x.flatten(1), 0, subset, r.to(x.dtype).flatten(1),
                                  alpha=b / kept)  # fmt: skip
            return out.view_as(x)

        def forward(self, x: Any) -> Any:
            if isinstance(x, list):  # each crop size on its own (DINOv2's nested lists)
                return [self(t) for t in x]
            x = self.residual(x, self.attention, self.ls1)
            return self.residual(x, self.feed_forward, self.ls2)

    class Chunk(nn.ModuleList):
        """Consecutive blocks, run in turn (with activation checkpointing when on)."""

        checkpointing = False

        def forward(self, x: Any) -> Any:
            for block in self:
                if self.checkpointing and self.training:
                    x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
            return x

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dim = dim
            if tubelet > 1:
                self.patch = nn.Conv3d(in_chans, dim, (tubelet, patch, patch),
                                       (tubelet, patch, patch))  # fmt: skip
            else:
                self.patch = nn.Conv2d(in_chans, dim, patch, patch)
            size = -(-depth // max(1, chunks))
            self.blocks = nn.ModuleList(
                Chunk(Block() for _ in range(i, min(depth, i + size)))
                for i in range(0, depth, size)
            )
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.checkpointing = checkpointing
            extra = 1 if cls_token else 0
            self.pos = nn.Parameter(torch.randn(1, extra + max_tokens, dim) * 0.02)
            self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if cls_token else None
            self.mask_token = nn.Parameter(torch.zeros(1, dim)) if mask_token else None

        @property
        def checkpointing(self) -> bool:
            return all(chunk.checkpointing for chunk in self.blocks)

        @checkpointing.setter
        def checkpointing(self, on: bool) -> None:
            for chunk in self.blocks:
                chunk.checkpointing = on

        def embed(self, images: Any) -> Any:
            return self.patch(images).flatten(2).transpose(1, 2)  # [B, N, D]

        def positions(self, n: int) -> Any:
            """Positions of ``n`` patch tokens: the first ``n``, or (with a CLS token)
            the square grid resized to ``sqrt(n)`` a side."""
            if self.cls is None:
                return self.pos[:, :n]
            grid = self.pos[:, 1:]
            if grid.shape[1] == n:
                return grid
            side, new = round(grid.shape[1] ** 0.5), round(n**0.5)
            square = grid.float().reshape(1, side, side, dim).permute(0, 3, 1, 2)
            resized = F.interpolate(square, size=(new, new), mode="bicubic")
            return resized.permute(0, 2, 3, 1).reshape(1, n, dim).to(grid.dtype)

        def run_blocks(self, x: Any) -> Any:
            for chunk in self.blocks:
                x = chunk(x)
            return [self.norm(t) for t in x] if isinstance(x, list) else self.norm(x)

        def forward(self, images: Any, keep: Any = None, masks: Any = None) -> Any:
            if isinstance(images, list):
                masks = masks or [None] * len(images)
                return self.run_blocks(
                    [self.tokens(x, None, m) for x, m in zip(images, masks, strict=True)]
                )
            return self.run_blocks(self.tokens(images, keep, masks))

        def tokens(self, images: Any, keep: Any = None, masks: Any = None) -> Any:
            """Patch embedding, mask tokens, positions, kept tokens, CLS token."""
            x = self.embed(images)
            if masks is not None:
                x = torch.where(masks.unsqueeze(-1), self.mask_token.to(x.dtype), x)
            x = x + self.positions(x.shape[1])
            if keep is not None:
                x = gather_tokens(x, keep)
            if self.cls is not None:
                cls = self.cls + self.pos[:, :1]
                x = torch.cat([cls.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)
            return x

    return ViT()


def swiglu_out(h: Any, weight: Any, bias: Any) -> Any:
    """``linear(silu(a) * b, weight, bias)`` for ``h = [a, b]``, keeping only ``h`` (and
    the weight) for the backward, which recomputes ``silu(a) * b``: the memory of
    xformers' fused SwiGLU, which DINOv2 trains with (plain autograd would also keep
    ``silu(a)`` and the product, twice the feed-forward's hidden width more per token).
    The same products forward and backward."""
    return _swiglu_function().apply(h, weight, bias)


@functools.cache
def _swiglu_function() -> Any:
    import torch
    from torch.nn import functional as F

    class SwiGLUOut(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, h: Any, weight: Any, bias: Any) -> Any:
            a, b = h.chunk(2, dim=-1)
            ctx.save_for_backward(h, weight)
            return F.linear(F.silu(a) * b, weight, bias)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            h, weight = ctx.saved_tensors
            a, b = h.chunk(2, dim=-1)
            sig = torch.sigmoid(a)
            silu = a * sig
            flat = grad.reshape(-1, grad.shape[-1])
            hidden = (silu * b).reshape(-1, b.shape[-1])
            grad_weight = flat.t().mm(hidden)
            grad_bias = flat.sum(0)
            grad_hidden = grad.matmul(weight)
            grad_a = grad_hidden * b * (sig * (1 + a * (1 - sig)))
            grad_h = torch.cat([grad_a, grad_hidden * silu], dim=-1)
            return grad_h, grad_weight, grad_bias

    return SwiGLUOut


def gather_tokens(x: Any, index: Any) -> Any:
    """The tokens ``index`` of ``x`` (``[B, N, D]``): the same ones for every sample
    (``[K]``) or per sample (``[B, K]``, jepa's ``apply_masks``)."""
    import torch

    if index.dim() == 1:
        return x[:, index]
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def ema_update(teacher: Any, student: Any, momentum: float) -> None:
    """teacher <- momentum x teacher + (1 - momentum) x student, in place, no grad.
    ``teacher`` and ``student``: modules, or lists of tensors in the same order."""
    import torch

    def tensors(x: Any) -> list:
        return list(x.parameters()) if hasattr(x, "parameters") else list(x)

    with torch.no_grad():
        t = tensors(teacher)
        s = [p.detach() for p in tensors(student)]
        torch._foreach_mul_(t, momentum)
        torch._foreach_add_(t, s, alpha=1.0 - momentum)


def block_flops(arch: str, tokens: int) -> int:
    """Forward FLOPs of one block of ``arch`` over ``tokens`` tokens: its matmuls (qkv,
    projection, feed-forward; 2 per multiply-add) and attention's two products
    (``4 x tokens^2 x dim``). The backward costs twice that."""
    dim, _depth, _heads, hidden, swiglu = ARCHES[arch]
    weights = 3 * dim * dim + dim * dim + dim * (2 * hidden if swiglu else hidden) + hidden * dim
    return 2 * weights * tokens + 4 * tokens * tokens * dim


def vit_flops(arch: str, tokens: int) -> int:
    """Forward FLOPs of the blocks of ``arch`` over ``tokens`` tokens (`block_flops`)."""
    return ARCHES[arch][1] * block_flops(arch, tokens)


def patch_flops(arch: str, pixels_per_patch: int, patches: int) -> int:
    """Forward FLOPs of the patch (or tubelet) embedding: one ``pixels x dim`` product
    per patch, ``pixels`` being channels x (frames x) patch side^2."""
    return 2 * pixels_per_patch * ARCHES[arch][0] * patches
