"""Records over xdist's own channel. An xdist worker may run on another host (``--tx ssh=...``)
or in another working directory (``--tx popen//chdir=...``), where the controller cannot read
its files: so each case's record rides on the case's teardown report, which xdist already sends
to the controller (pytest serialises a report's ``__dict__``, so an extra attribute travels with
it), and the controller writes the run's records. A report reaches the controller as soon as the
case ends, so a worker that crashes later loses nothing already recorded.

A worker also keeps what it sent in a local cache (``<records dir>/worker-cache/<worker>.records``,
JSON lines, not ``*.jsonl``: readers of a run directory never count it twice); it is a copy for
inspection on that host, not the source of the report."""
from __future__ import annotations

import json
from pathlib import Path

from .records import RecordWriter, dumps

#: The teardown report's attribute that carries the case's record (a JSON line).
ATTR = "attnsuite_record"
CACHE_DIR = "worker-cache"


def attach(report, record: dict) -> None:
    """Put ``record`` on ``report`` for the controller (text: execnet sends only plain data)."""
    setattr(report, ATTR, dumps(record))


def carried(report) -> dict | None:
    """The record a report carries, or None (a report of a non-case test, or of a phase before
    teardown)."""
    line = getattr(report, ATTR, None)
    if not isinstance(line, str):
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


class WorkerCache:
    """A worker's local copy of the records it sent. Best effort: a host where the records
    directory cannot be made (a read-only checkout) keeps no copy; the run does not notice."""

    def __init__(self, run_dir: str | Path, worker: str):
        self._writer = RecordWriter(Path(run_dir) / CACHE_DIR, worker, suffix=".records", create=False)
        self._broken = False

    def write(self, record: dict) -> None:
        if self._broken:
            return
        try:
            self._writer.write(record)
        except OSError:
            self._broken = True

    def close(self) -> None:
        self._writer.close()


class ControllerWriters:
    """The controller's writers: one ``<run_dir>/<worker>.jsonl`` per worker whose records it
    received (the layout a run directory had when workers wrote it themselves), plus its own
    records (crashes, cases never run) in ``controller.jsonl``."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self._writers: dict[str, RecordWriter] = {}

    def __call__(self, worker: str = "controller") -> RecordWriter:
        if worker not in self._writers:
            # No fsync per record: the controller runs no kernel, and one fsync per case in the
            # loop that hands out cases would slow a many-worker GPU run.
            self._writers[worker] = RecordWriter(self.run_dir, worker, fsync=False)
        return self._writers[worker]

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
