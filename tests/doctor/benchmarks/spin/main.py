"""A steady CPU loop measured by benchkit's time window (stdlib only): each step sums
squares, so its rate follows the CPU time the process gets, and another process on the
same CPUs shows up in it. The window comes from the entry's `measure` block."""

from benchkit.timing import TimedIterator


def batches():
    while True:
        sum(i * i for i in range(5000))
        yield 1


for _ in TimedIterator(batches(), batch_size=1, device="cpu", units="items/s"):
    pass
