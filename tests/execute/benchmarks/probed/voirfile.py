"""benchkit probes whose selectors come from the entry's environment, so that one test
benchmark can be run with right and wrong selectors."""

import os

from benchkit.instruments import benchkit_instrument

instrument_main = benchkit_instrument(
    loader=os.environ.get("PROBE_LOADER", "//main > loader"),
    loss=os.environ.get("PROBE_LOSS", "//train_step > loss"),
)
