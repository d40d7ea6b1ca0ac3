"""benchkit: the in-benchmark helper library.

Standard library only: it is made importable inside every benchmark environment without
the orchestrator's dependencies. Optional accelerations (torch events, pynvml, psutil)
are used only when the benchmark's own environment already has them.

Modules, by role:

* writing: `channel` (the data channel: batched `DataWriter`, smuggling codec),
  `records` (the records a step timer writes);
* settings: `options` (the ``measure`` block, stop/skip/interval/gpu_poll),
  `stopping` (`StopProgram`, `run_main`, `budget`: exit 0 once the window is over),
  `exiting` (`run_and_exit`: a clean end without the interpreter's teardown);
* measuring a loop: `timing` (`TimedIterator`, the front), `meter` (convert, decide,
  write between two steps), `window` (when warm-up and measurement end), `clock` (step
  stamps: device events or host time), `pending` (steps not yet converted), `losses`
  (lazy losses), `agreement` (distributed ranks deciding together);
* third-party scripts under voir: `instruments` (`benchkit_instrument`, `wrap_loader`),
  `voirfile` (its names under the voirfile's name), `session` (a voir run's state and
  probes), `stepmode` (a step selector wired to a `StepTimer`), `steps` (`StepTimer`,
  wrapped calls, traced lines), `overhead` (what the instrumentation costs per step);
* watching the machine: `monitors` (background samples), `accelerators` (which
  accelerator back-end answers, its devices and samples), `smi` (vendor command-line
  monitors' outputs parsed);
* benchmark set-up: `torchsetup`, `jaxsetup` (options, device check), `memory` (will an
  entry fit), `devicemem` (torch's peak allocated and reserved device memory, once per
  process), `flops` (work per item, for TFLOPS and MFU), `golden` (are the numbers
  right), `synthetic` (synthetic samples served by a DataLoader).
"""

from benchkit.stopping import StopProgram, budget, run_main

__version__ = "0.1.0"
__all__ = ["StopProgram", "TimedIterator", "budget", "run_main"]


def __getattr__(name: str):
    # TimedIterator lives in its own module; import it only when asked for.
    if name == "TimedIterator":
        from benchkit.timing import TimedIterator

        return TimedIterator
    raise AttributeError(f"module 'benchkit' has no attribute {name!r}")
