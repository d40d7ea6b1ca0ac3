# sine_wave.py parses its arguments at import time and calls train() once per epoch from
# top-level code: each call is one step, its items the waves of the `inputs` argument,
# its loss the value train() returns.
from benchkit.instruments import benchkit_instrument

instrument_main = benchkit_instrument(step="train()", batch_size="inputs", loss="return")
