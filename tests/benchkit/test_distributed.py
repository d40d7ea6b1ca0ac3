"""A real 2-process torchrun (gloo, CPU): rank 0 reports the global throughput."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from benchkit.channel import SmuggleDecoder

_SCRIPT = textwrap.dedent(
    """
    import os, time
    import torch
    import torch.distributed as dist
    from benchkit.timing import TimedIterator

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    per_rank = 4 if rank == 0 else 6        # unequal on purpose: the sum is 10
    loader = [torch.zeros(per_rank, 2) for _ in range(12)]
    counts = {"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0}
    window = {"warmup_min": "0.3s", "warmup_max": "0.6s", "min": "1s", "max": "1.5s",
              "precision": 1e-9, "stop_unreachable": False}  # to max: the ranks' agreement
    if os.environ["MODE"] == "counts":
        it = TimedIterator(loader, stop=8, skip=2, interval=3600, monitor=False, measure=counts)
    else:
        it = TimedIterator(loader, interval=3600, monitor=False, measure=window)
    steps = 0
    for epoch in range(100):
        for batch in it:
            time.sleep(0.05)
            it.record_loss(torch.tensor(float(rank)))
            steps += 1
        if it.done:
            break
    print(f"rank {rank} steps {steps} done {it.done}", flush=True)
    dist.destroy_process_group()
    """
)


def torchrun(tmp_path, mode):
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, DATA_FD="1", OMP_NUM_THREADS="1", MODE=mode)  # no fds through torchrun
    env.pop("MILABENCH_CONFIG", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "--master-addr=127.0.0.1",
            "--master-port=0",
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=127.0.0.1:0",
            str(script),
        ],
        env=env,
        capture_output=True,
        timeout=240,
        cwd=tmp_path,
    )
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    decoder = SmuggleDecoder()
    text, lines = decoder.feed(out)
    return text, [json.loads(x) for x in lines]


@pytest.mark.slow
def test_torchrun_global_throughput_from_rank_zero(tmp_path):
    text, records = torchrun(tmp_path, "counts")
    assert "rank 0 steps 10 done True" in text and "rank 1 steps 10 done True" in text
    rates = [r["rate"] for r in records if "rate" in r]
    assert len(rates) == 8  # only rank 0 wrote: not 16
    # 10 items (4 + 6 from both ranks) per >= 50 ms step: at most 200 items/s, and well
    # above the 80 items/s that rank 0's own 4 items would give.
    assert all(120 < r <= 200 for r in rates), rates
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses and set(losses) == {0.0}  # rank 0's own losses
    assert sum(1 for r in records if r.get("$event") == "stop") == 1


@pytest.mark.slow
def test_torchrun_time_window_ends_on_the_same_step_on_every_rank(tmp_path):
    """Ranks meet at agreed step counts: rank 0's window decides, every rank stops at the
    same step (a rank that stopped alone would leave the others in an all-reduce)."""
    text, records = torchrun(tmp_path, "window")
    steps = sorted(int(line.split()[3]) for line in text.splitlines() if line.startswith("rank"))
    assert len(steps) == 2 and steps[0] == steps[1], text
    window = [r["window"] for r in records if "window" in r]
    assert len(window) == 1 and window[0]["reason"] == "max_time"
    assert 1.5 <= window[0]["measured_s"] < 3.0
    rates = [r["rate"] for r in records if "rate" in r]
    assert (
        len(rates) == window[0]["observations"]
        and len(rates) + window[0]["warmup_observations"] <= steps[0]
    )
    assert all(120 < r <= 200 for r in rates), rates
