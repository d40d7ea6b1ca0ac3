"""Instruments attached to main.py through ptera probes (main.py is not edited)."""

import time

from voir.instruments import early_stop, log


def instrument_main(ov):
    yield ov.phases.init
    ov.argparser.add_argument("--stop", type=int, default=5)
    ov.argparser.add_argument("--gpu-poll", type=float, default=1.0)
    yield ov.phases.parse_args
    stop = ov.options.stop
    ov.require(log("loss", "rate", "progress", context="task"))
    ov.require(early_stop(key="loss", n=stop, task="train", signal="stop"))
    yield ov.phases.load_script
    last = [time.perf_counter()]

    def with_rate(data):
        now = time.perf_counter()
        rate = 1.0 / max(now - last[0], 1e-9)
        last[0] = now
        return {"task": "train", "loss": data["loss"], "rate": rate, "units": "steps/s"}

    ov.probe("//train_step > loss").map(with_rate).give()
