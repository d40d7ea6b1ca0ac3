"""CPU training workload for scripts/perf_overhead.py (a small MLP, fixed step count).

``--bare`` iterates the loader directly; otherwise the loader is wrapped in
`benchkit.timing.TimedIterator` (rates, lazy losses, progress, monitor, data channel).
Either way the script measures its own throughput over the steps after warm-up and prints
``PERF <items per wall second> <items per CPU second of this process>``: figures
independent of the instrumentation being measured, so bare and instrumented runs compare
like for like. The CPU-time figure counts every thread of the process (the monitor
included) and is far less sensitive to other load on a shared machine.
"""

import argparse
import time

import torch

NO_WINDOW = {"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument(
        "--paired",
        type=int,
        default=0,
        metavar="BLOCKS",
        help="alternate BLOCKS blocks of bare and instrumented steps in this process",
    )
    parser.add_argument("--block", type=int, default=100, help="steps per paired block")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width),
        torch.nn.ReLU(),
        torch.nn.Linear(args.width, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    xs = torch.randn(32, args.batch, args.width)
    ys = torch.randint(0, 10, (32, args.batch))
    loader = [(xs[i % 32], ys[i % 32]) for i in range(args.steps)]

    if args.paired:
        paired(args, model, opt, loss_fn, loader)
        return

    if args.bare:
        it = loader
        record = None
    else:
        from benchkit.timing import TimedIterator

        # No time window: bare and instrumented runs must do the same steps, so the
        # window may not end the run early (warm-up of exactly ``--warmup`` steps).
        it = TimedIterator(loader, stop=0, skip=args.warmup, measure=NO_WINDOW)
        record = it.record_loss

    t_start = None
    for step, (x, y) in enumerate(it):
        if step == args.warmup:
            t_start = time.perf_counter()
            c_start = time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if record is not None:
            record(loss)
    if record is not None:
        it.close()  # the final flush is part of the instrumented run's cost
    elapsed = time.perf_counter() - t_start
    cpu = time.process_time() - c_start
    items = (args.steps - args.warmup) * args.batch
    print(f"PERF {items / elapsed:.3f} {items / cpu:.3f}", flush=True)


def paired(args, model, opt, loss_fn, loader) -> None:
    """Bare and instrumented blocks alternating in one process: slow drifts of the load of
    a shared machine hit both sides alike. Each instrumented block is one epoch of a
    `TimedIterator` (timing, lazy losses, its flush at the epoch end, records written).
    Prints ``PAIRED <median overhead %> <bare items/cpu-s> <instrumented items/cpu-s>``."""
    import statistics

    from benchkit.timing import TimedIterator

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    block = loader[: args.block]
    for x, y in loader[: args.warmup]:
        step(x, y)
    bare_t, inst_t, ratios = [], [], []
    for _ in range(args.paired):
        c0 = time.process_time()
        for x, y in block:
            step(x, y)
        c1 = time.process_time()
        it = TimedIterator(block, stop=0, skip=0, monitor=False, measure=NO_WINDOW)
        for x, y in it:
            it.record_loss(step(x, y))
        c2 = time.process_time()
        bare_t.append(c1 - c0)
        inst_t.append(c2 - c1)
        ratios.append((c2 - c1) / (c1 - c0))
    items = args.block * args.batch
    overhead = 100.0 * (statistics.median(ratios) - 1.0)
    print(
        f"PAIRED {overhead:.3f} {items / statistics.median(bare_t):.3f} "
        f"{items / statistics.median(inst_t):.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
