"""Measure ``main.py`` from outside: it is third-party code and is not edited.

Two ptera probes do all the work: the value that ``main()`` assigns to ``train_loader``
(the return value of the script's ``dataloader`` factory) is replaced by a
`benchkit.timing.TimedIterator` around it, which times the steps, writes ``rate``
records and ends the run when the budget is spent; every value assigned to ``loss`` in
``train()`` is recorded (lazily) as the training loss.
"""

from benchkit.instruments import benchkit_instrument

instrument_benchkit = benchkit_instrument(
    loader="//main > train_loader",
    loss="//train > loss",
)
