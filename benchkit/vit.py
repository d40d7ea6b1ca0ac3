"""A Vision Transformer in plain torch, for images (2D patches) and videos (3D tubelets),
shared by the DINOv2 and V-JEPA benchmarks.

Why plain torch: the real stacks (facebookresearch's dinov2 and jepa repositories) are not
on the package registries, and what the standard suite measures is their computational
shape: pre-norm transformer blocks over patch tokens, `scaled_dot_product_attention`
(flash attention on GPUs), MLP or SwiGLU feed-forward, optional activation checkpointing.
The published shapes are `ARCHES` (ViT-g/14: DINOv2's giant; ViT-L: V-JEPA's encoder).
torch is imported lazily (benchkit's rule: this module imports with the standard library).
"""

from __future__ import annotations

from typing import Any

#: name -> (embed dim, depth, heads, feed-forward hidden, SwiGLU)
ARCHES = {
    "giant": (1536, 40, 24, 4096, True),  # ViT-g/14 as DINOv2 trains it (SwiGLU 4096)
    "large": (1024, 24, 16, 4096, False),  # ViT-L
    "small": (384, 12, 6, 1536, False),  # ViT-S (V-JEPA's predictor is 384 wide)
    "tiny": (64, 2, 2, 128, False),
}


def build_vit(
    arch: str,
    *,
    patch: int,
    in_chans: int = 3,
    tubelet: int = 1,
    checkpointing: bool = False,
    max_tokens: int = 4096,
    cls_token: bool = False,
) -> Any:
    """A ViT encoder: patch (or tubelet) embedding, learned positions (the first N of
    ``max_tokens``: crops of several sizes share them, as DINOv2's interpolated ones do),
    an optional CLS token, blocks, final norm. ``forward(images, keep=None)`` returns token
    features ``[B, (1 +) N, D]``; ``keep`` (``[K]`` token indices) runs the blocks on those
    tokens only (masked modelling: the context encoder sees the visible tokens)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    dim, depth, heads, hidden, swiglu = ARCHES[arch]

    class FeedForward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.swiglu = swiglu
            self.fc1 = nn.Linear(dim, 2 * hidden if swiglu else hidden)
            self.fc2 = nn.Linear(hidden, dim)

        def forward(self, x: Any) -> Any:
            h = self.fc1(x)
            if self.swiglu:
                a, b = h.chunk(2, dim=-1)
                h = F.silu(a) * b
            else:
                h = F.gelu(h)
            return self.fc2(h)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = FeedForward()

        def forward(self, x: Any) -> Any:
            b, n, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, heads, dim // heads).unbind(2)
            att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                 v.transpose(1, 2))  # fmt: skip
            x = x + self.proj(att.transpose(1, 2).reshape(b, n, dim))
            return x + self.mlp(self.norm2(x))

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dim = dim
            if tubelet > 1:
                self.patch = nn.Conv3d(in_chans, dim, (tubelet, patch, patch),
                                       (tubelet, patch, patch))  # fmt: skip
            else:
                self.patch = nn.Conv2d(in_chans, dim, patch, patch)
            self.blocks = nn.ModuleList(Block() for _ in range(depth))
            self.norm = nn.LayerNorm(dim)
            self.checkpointing = checkpointing
            self.pos = nn.Parameter(torch.randn(1, max_tokens, dim) * 0.02)
            self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if cls_token else None

        def embed(self, images: Any) -> Any:
            return self.patch(images).flatten(2).transpose(1, 2)  # [B, N, D]

        def run_blocks(self, x: Any) -> Any:
            for block in self.blocks:
                if self.checkpointing and self.training:
                    x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
            return self.norm(x)

        def forward(self, images: Any, keep: Any = None) -> Any:
            x = self.embed(images)
            x = x + self.pos[:, : x.shape[1]]
            if keep is not None:
                x = x[:, keep]
            if self.cls is not None:
                x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
            return self.run_blocks(x)

    return ViT()


def ema_update(teacher: Any, student: Any, momentum: float) -> None:
    """teacher <- momentum x teacher + (1 - momentum) x student, in place, no grad."""
    import torch

    with torch.no_grad():
        t = [p for p in teacher.parameters()]
        s = [p.detach() for p in student.parameters()]
        torch._foreach_mul_(t, momentum)
        torch._foreach_add_(t, s, alpha=1.0 - momentum)
