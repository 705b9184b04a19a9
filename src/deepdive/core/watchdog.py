"""A hung cell ends the build's kernel with every thread's stack, in minutes, not an hour.

The build's cell timeout (`_config.yml`, one hour) is sized for a full-scale GPU sweep. At
small scale a cell stuck that long eats most of CI's time and the log says nothing of where
it stopped. `guard_cells` arms Python's `faulthandler` before each cell and disarms it after
the cell: a cell still running at `limit_s` has every thread's Python stack written to the
kernel's own stderr (the build's log) and the kernel exits, so the page fails at once and
the log shows where it hung. `faulthandler` dumps from a C thread, so it fires even when the
main thread is stuck inside a framework's native code and never returns to Python.

It sees the kernel's threads only: where a cell waits on processes it started (chapter 6's
ranks, the PyTorch/XLA worker), the stack shows the wait, not what the child was doing.

Only the book's build arms it (`DEEPDIVE_BUILD=1`): a reader's kernel is never ended for
them.
"""
from __future__ import annotations

import faulthandler
import io
import math
import os
import sys
import time

__all__ = ["guard_cells", "log_descriptor"]

_armed: dict[str, object] = {}  # the callbacks registered by the last call, to replace them


def guard_cells(limit_s: float | None, shell=None) -> bool:
    """End this kernel, with every thread's stack on stderr, when a cell runs past `limit_s`.

    Returns whether the guard is armed: not outside the build (`DEEPDIVE_BUILD` unset), with
    no limit (`None`: the scale is not guarded), or outside IPython. Calling it again
    replaces the previous guard.
    """
    if limit_s is not None and (isinstance(limit_s, bool) or not isinstance(limit_s, int | float)
                                or not math.isfinite(limit_s) or limit_s <= 0):
        raise ValueError(f"limit_s must be a positive number of seconds or None, got {limit_s!r}")
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    _disarm_previous()
    if limit_s is None or os.environ.get("DEEPDIVE_BUILD") != "1" or shell is None:
        return False
    log = log_descriptor()

    def arm(*_):  # IPython passes the cell's info; the limit is the same for every cell
        faulthandler.dump_traceback_later(limit_s, exit=True, file=log)

    def disarm(*_):
        faulthandler.cancel_dump_traceback_later()

    shell.events.register("pre_run_cell", arm)
    shell.events.register("post_run_cell", disarm)
    _armed.update(shell=shell, pre_run_cell=arm, post_run_cell=disarm)
    now = time.strftime("%H:%M:%S", time.gmtime())  # the build's log has no clock of its own
    os.write(log, f"[deepdive {now} UTC] a cell still running after {limit_s:.0f} s ends this "
                  "kernel and writes every thread's stack here (deepdive.core.watchdog)\n"
             .encode())
    return True


def log_descriptor() -> int:
    """The file descriptor of the process's own stderr, which the build logs.

    In a Jupyter kernel, descriptor 2 is a pipe that a Python thread copies into the page:
    a dump written there would be cut short by the kernel's exit (or never copied, with the
    main thread stuck holding the interpreter lock), and the armed message would land on
    the page. ipykernel's `sys.stderr.fileno()` is its copy of the original stderr.
    """
    try:
        return sys.stderr.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return sys.__stderr__.fileno()


def _disarm_previous() -> None:
    if _armed.get("shell") is not None:
        for event in ("pre_run_cell", "post_run_cell"):
            try:
                _armed["shell"].events.unregister(event, _armed[event])
            except ValueError:  # already gone
                pass
        faulthandler.cancel_dump_traceback_later()
    _armed.clear()
