"""benchkit.synthetic: upstream's loader for the transformers benchmarks (a few samples
made once, repeated by a DataLoader, every batch copied to the device)."""

from __future__ import annotations

import pytest

from benchkit.synthetic import REPEAT, RepeatedSamples


def test_repeated_samples_cycle_in_order():
    data = RepeatedSamples(["a", "b", "c"], repeat=2)
    assert len(data) == 6
    assert [data[i] for i in range(6)] == ["a", "b", "c", "a", "b", "c"]
    assert len(RepeatedSamples([0])) == REPEAT
    with pytest.raises(ValueError):
        RepeatedSamples([])


@pytest.mark.parametrize("workers", [0, 1])
def test_loader_serves_the_same_batch_every_step(workers):
    torch = pytest.importorskip("torch")
    from benchkit.synthetic import collate, repeated_loader, to_device

    samples = [{"x": torch.full((3,), float(i)), "y": torch.tensor(i)} for i in range(4)]
    batches = iter(repeated_loader(samples, batch_size=4, num_workers=workers))
    first, second = next(batches), next(batches)
    expected = collate(samples)
    for batch in (first, second):
        assert set(batch) == {"x", "y"} and batch["x"].shape == (4, 3)
        assert torch.equal(batch["x"], expected["x"]) and torch.equal(batch["y"], expected["y"])
    moved = to_device(first, torch.device("cpu"))
    assert moved["y"].tolist() == [0, 1, 2, 3]
