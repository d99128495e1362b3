"""A quiet stop: SIGTERM (``timeout``, a CI limit) and SIGINT (Ctrl-C) end the run the way an
interrupt does, so the records already written are kept, the cases never reached are recorded as
``not_run`` and the summary, ``run.json`` and report are still written, without a traceback.

The stop is raised as pytest's own ``Interrupted`` (a KeyboardInterrupt): every layer that
unwinds on Ctrl-C (pytest, xdist's controller loop, execnet) unwinds on it, and pytest prints it
as one ``!!! Interrupted: ... !!!`` line where a KeyboardInterrupt gets its traceback's last frame
and a hint. A signal repeated within ``REPEAT_WINDOW_S`` is the same stop delivered twice
(``timeout`` signals its command, then the command's whole process group, which the command is
in) and is ignored: raised again, it would land in the middle of writing the report and escape
as a full traceback. A later one means "now": the process exits at once."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest

REPEAT_WINDOW_S = 5.0


class QuietStop:
    def __init__(self, account, clock=time.monotonic):
        self.account = account
        self.clock = clock
        self.first: float | None = None

    def install(self) -> None:
        """Take SIGTERM and SIGINT where they still have their default handlers (a harness
        that set its own keeps it); not from a thread other than the main one."""
        for sig, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
            if signal.getsignal(sig) is not default:
                continue
            try:
                signal.signal(sig, self)
            except ValueError:  # not the main thread
                return

    def __call__(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        now = self.clock()
        if self.first is None:
            self.first = now
            self.account.interrupted = self.account.interrupted or name
            raise pytest.Session.Interrupted(f"{name}: stopping; the records and report keep what ran")
        if now - self.first < REPEAT_WINDOW_S:
            return
        sys.stderr.write(f"\nattnsuite: {name} again while stopping: exiting now (records so far are on disk)\n")
        sys.stderr.flush()
        os._exit(128 + signum)
