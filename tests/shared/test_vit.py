"""benchshared.vit at tiny sizes on CPU: DINOv2's stochastic depth and layer scale, the
EMA update of a teacher. The DINOv2 and V-JEPA benchmarks built on it run in
tests/benchmarks/test_vit.py."""

from __future__ import annotations


def test_stochastic_depth_runs_each_branch_on_60_percent_of_the_batch():
    """DINOv2's ``drop_add_residual_stochastic_depth`` at rate 0.4: each residual branch
    runs on int(0.6 x batch) samples in training, on all of them in eval mode; layer
    scale starts at 1e-5."""
    import torch

    from benchshared.vit import build_vit

    vit = build_vit("tiny", patch=8, cls_token=True, max_tokens=16, drop_path=0.4,
                    layer_scale=1e-5)  # fmt: skip
    seen = []
    for block in (b for chunk in vit.blocks for b in chunk):
        assert torch.all(block.ls1 == 1e-5) and torch.all(block.ls2 == 1e-5)
        block.qkv.register_forward_hook(lambda m, i, o: seen.append(("attn", i[0].shape[0])))
        block.mlp.register_forward_hook(lambda m, i, o: seen.append(("ffn", i[0].shape[0])))
    x = torch.randn(10, 3, 32, 32)
    vit.train()
    out = vit(x)
    assert out.shape == (10, 17, 64) and {n for _, n in seen} == {6}
    seen.clear()
    vit.eval()
    vit(x)
    assert {n for _, n in seen} == {10}


def test_ema_moves_the_teacher_towards_the_student():
    import copy

    import torch

    from benchshared.vit import build_vit, ema_update

    student = build_vit("tiny", patch=8, cls_token=True, max_tokens=16)
    teacher = copy.deepcopy(student)
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
    before = [p.clone() for p in teacher.parameters()]
    ema_update(teacher, student, 0.9)
    for b, t, s in zip(before, teacher.parameters(), student.parameters(), strict=True):
        assert torch.allclose(t, 0.9 * b + 0.1 * s)
    out = student(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 1 + 16, 64)  # CLS + 4 x 4 patches
