# word_language_model.py slices batches out of a token tensor over an index range: no
# loader to wrap. One step ends each time train() assigns `loss`; it covered the tokens of
# `data` (captured by the selector), and `loss` is the step's own variable.
from benchkit.instruments import benchkit_instrument

instrument_main = benchkit_instrument(
    step="//train(data) > loss", batch_size=("data", lambda data: data.numel()),
    loss="loss", units="Tok/s",
)  # fmt: skip
