# regression.py loops over a DataLoader that main() assigns to `loader`: the loader is
# wrapped (each batch is a step, its length the items) and every `loss` is recorded.
from benchkit.instruments import benchkit_instrument

instrument_main = benchkit_instrument(loader="//main > loader", loss="//main > loss")
