"""train_script.py is measured through probes only (the script is not edited)."""

from benchkit.instruments import benchkit_instrument

instrument_main = benchkit_instrument(loader="//main > loader", loss="//train_step > loss")
