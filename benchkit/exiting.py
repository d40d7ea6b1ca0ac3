"""Ending a benchmark process without paying for the interpreter's teardown.

A benchmark that returns from ``main`` has written everything it measures, yet CPython
then frees every module it imported: 0.4 s of one core after ``import torch``, 0.9 s
after transformers, each rank under torchrun paying it again. `run_and_exit` ends
the process the way the interpreter would, minus that: it waits for the non-daemon
threads, runs the ``atexit`` handlers (the data channel's flush and close, the window's
summary, multiprocessing's stop of its daemon children such as DataLoader workers),
flushes the standard streams and leaves with ``os._exit``.

Only a clean ending takes the short way (``main`` returned ``None`` or ``0``, raised
``SystemExit`` with neither, or the observation budget stopped it). An exception, a
``SystemExit`` with a message or another code,
and any run under voir (whose overseer finishes after the script) go through the normal
interpreter exit, so tracebacks, exit codes and voir's own phases are unchanged.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from benchkit.stopping import is_stop


def run_and_exit(main: Callable[[], Any]) -> NoReturn:
    """``if __name__ == "__main__": run_and_exit(main)``: call ``main`` and end the
    process (see the module's docstring for which endings take the short way)."""
    try:
        result = main()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
        result = None  # argparse's --help, a script's own sys.exit(0)
    except BaseException as exc:
        if not is_stop(exc):
            raise
        result = None
    if result not in (None, 0) or "voir" in sys.modules:
        sys.exit(result)
    finish(0)


def finish(code: int = 0) -> NoReturn:
    """End the process now, with what a normal exit would do except freeing modules."""
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass  # closed or replaced: nothing left to write
    os._exit(code)
