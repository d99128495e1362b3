"""The suite's session: everything one pytest process knows about this run (options, device,
registry, ledger, implementations, records), built once in ``pytest_configure`` and reached from
every hook through ``attnsuite.context.suite(config)``. Hooks stay thin; the work is in plain
methods here and in the modules they call (runner, recording, accounting)."""
from __future__ import annotations

import shlex
from pathlib import Path

from . import registry
from .case import select
from .collection import CaseParam, case_params
from .options import RunOptions
from .records import RecordWriter
from .transport import ControllerWriters, WorkerCache


class SuiteSession:
    def __init__(self, options: RunOptions, *, worker: str, controller: bool):
        self.options = options
        self.worker = worker
        #: True in xdist's controller process, which runs no case.
        self.controller = controller
        #: True in an xdist worker: its records go to the controller (attnsuite/transport.py).
        self.in_worker = worker not in ("main", "controller")
        self.device = None
        self._env: dict | None = None
        self._device_info: dict | None = None
        self._ledger: list | None = None
        self._impls: dict | None = None
        self._params: dict[str, list[CaseParam]] = {}
        self.report_error: str | None = None
        #: The controller's thread writing the report and traces at session end (plugin.py).
        self.report_writer = None
        #: --trace-out: one line on what was written (set at session end).
        self.trace_summary: str | None = None
        #: (family, case id, impl) -> the record fields about its reproduction script.
        self.repro_scripts: dict[tuple, dict] = {}
        #: Where this process's records go (``writer``), made on first use.
        self._writer = None
        #: The case watchdog of a process that runs cases (attnsuite/hung.py), made on first use.
        self.watchdog = None
        #: An xdist worker's fault dump file, kept open while the process lives.
        self.faults = None
        #: --impl: the families whose cases are collected (None: every family; collection.py).
        self.only_families: set[str] | None = None

    # -- what this run covers -------------------------------------------------------------------
    def families(self) -> dict:
        return registry.families(self.options.registry)

    def family_at(self, path: Path):
        return registry.family_at(path, self.options.registry)

    def in_registry_package(self, path: Path) -> bool:
        """Whether ``path`` lies in the registry's package (checked without importing it)."""
        return registry.package_dir(self.options.registry) == Path(path).resolve().parent

    def cases(self, family) -> list:
        if self.options.profile == "fuzz":
            from .fuzz import fuzz_cases

            return fuzz_cases(family, self.options.fuzz_seed, self.options.fuzz_count) + self.workload_cases(family)
        return select(family.cases, self.options.profile) + self.workload_cases(family)

    def workload_cases(self, family) -> list:
        """The family's cases from --workloads (FlashInfer-Trace workloads), whatever the profile."""
        if self.options.workloads is None:
            return []
        from .flashinfer_trace.workloads import load

        return load(str(self.options.workloads)).cases.get(family.name, [])

    def ledger(self) -> list:
        if self._ledger is None:
            from .ledger import load

            paths = (self.options.ledger_path, *self.options.extra_ledgers)
            self._ledger = [entry for path in paths if path is not None for entry in load(path)]
            ids = [e.id for e in self._ledger]
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise ValueError(f"--ledger: entry ids used twice across ledgers: {dupes}")
        return self._ledger

    def implementations(self) -> dict:
        """family -> [(name, implementation)] from --impl, resolved (and checked) once."""
        if self._impls is None:
            from .impls import parse_options, resolve_all, search_also

            search_also(self.options.import_dirs)
            self._impls = resolve_all(parse_options(list(self.options.impl_specs)), self.families())
        return self._impls

    def impls_for(self, family) -> list[tuple[str, object]]:
        """The implementations this session tests for ``family`` (its default one unless --impl)."""
        return self.implementations().get(family.name) or [family.default_impl()]

    def impl(self, family, name: str):
        return next(fn for n, fn in self.impls_for(family) if n == name)

    def params(self, family) -> list[CaseParam]:
        """The items of a family: (case, implementation) pairs with their ledger verdict."""
        if family.name not in self._params:
            from .ledger import lookup

            opts = self.options
            known = lambda case, impl: lookup(self.ledger(), case, opts.device_kind,  # noqa: E731
                                              mode=opts.mode, impl=impl)
            self._params[family.name] = case_params(family, self.cases(family),
                                                    [n for n, _ in self.impls_for(family)], known, opts.mode)
        return self._params[family.name]

    def param_for(self, nodeid: str) -> CaseParam | None:
        """The param behind a node id, for the records of items that ran in a dead worker."""
        path, _, name = nodeid.partition("::")
        if "[" in name and not any(name.startswith(f) for f in self.families()):
            return self.bench_param(name[name.index("[") + 1:-1])
        for family in self.families().values():
            if registry.module_path(family.name, self.options.registry).name != Path(path).name:
                continue
            return next((p for p in self.params(family) if p.node_name == name), None)
        return None

    def bench_param(self, ident: str) -> CaseParam | None:
        """A benchmark item's param from its id (``case id`` or ``case id@impl`` when several
        implementations run): the case, the implementation it times, no ledger."""
        case_id, _, impl = ident.partition("]@")
        case_id = case_id + "]" if impl else ident
        family_name = case_id.split("[", 1)[0]
        family = self.families().get(family_name)
        pool = [*family.cases, *self.workload_cases(family)] if family else []
        case = next((c for c in pool if c.id == case_id), None)
        if case is None:
            return None
        names = [n for n, _ in self.impls_for(family)]
        if impl and impl not in names:
            return None
        return CaseParam(family, case, impl or names[0], None, ident, "bench")

    # -- running ---------------------------------------------------------------------------------
    def run(self, param: CaseParam):
        from .runner import run_case

        if self.options.compile_targets and not param.family.launches_kernel(param.case):
            from .collection import skip

            skip(f"compile-only: {param.case.id} runs plain PyTorch, no kernel to compile")
        impl = self.impl(param.family, param.impl)
        outcome = run_case(param.family, param.case, self.device, impl, compile_targets=self.options.compile_targets)
        if outcome.status == "fail" and not self.options.compile_targets and getattr(impl, "library", None):
            self._write_repro_script(param, impl, outcome)
        return outcome

    def _write_repro_script(self, param: CaseParam, impl, outcome) -> None:
        """A library's failure gets a stand-alone reproduction (attnsuite/repro_script.py) beside
        the report; its path, or why none could be written, goes into the case's record."""
        from . import repro_script

        base = self.options.report_path.parent if self.options.report_path else self.options.run_dir
        key = (param.family.name, param.case.id, param.impl)
        written = sum(1 for (fam, _, impl), v in self.repro_scripts.items()
                      if (fam, impl) == key[::2] and "repro_script" in v)
        if written >= repro_script.MAX_PER_IMPL:  # a library failing a whole family: a few suffice
            self.repro_scripts[key] = {"repro_script_error": f"this process already wrote {written} scripts for "
                                                             f"{param.family.name}={param.impl}; run the repro command"}
            return
        try:
            path = repro_script.write(param.family, param.case, param.impl, impl, self.device, outcome.metrics,
                                      outcome.message, base / "repro")
            self.repro_scripts[key] = {"repro_script": str(path.resolve())}
        except Exception as exc:  # the failure is recorded either way; the script is a convenience
            self.repro_scripts[key] = {"repro_script_error": f"{type(exc).__name__}: {exc}"}

    # -- where records go ---------------------------------------------------------------------------
    def writer(self, worker: str = "controller"):
        """Where this process's records go, one writer per process. One pytest process: its
        records file. An xdist worker: its local cache (the records themselves travel on the
        reports). The controller: a file per worker for the records it receives,
        ``controller.jsonl`` for its own."""
        if self._writer is None:
            if self.in_worker:
                self._writer = WorkerCache(self.options.run_dir, self.worker)
            elif self.controller:
                self._writer = ControllerWriters(self.options.run_dir)
            else:
                self._writer = RecordWriter(self.options.run_dir, self.worker)
        w = self._writer
        return w(worker) if isinstance(w, ControllerWriters) else w

    def close_writers(self) -> None:
        if self._writer is not None:
            self._writer.close()

    # -- what every record carries ----------------------------------------------------------------
    def env(self) -> dict:
        if self._env is None:
            from .environment import fingerprint

            self._env = fingerprint(self.device, self.options.device_kind)
        return self._env

    def device_info(self) -> dict:
        if self._device_info is None:
            uuid = self.device.uuid() if self.device is not None and not self.options.compile_targets else None
            self._device_info = {"kind": self.options.device_kind, "index": getattr(self.device, "index", None),
                                 "uuid": uuid}
        return self._device_info

    def repro(self, nodeid: str, family: str, impl: str) -> str:
        """A command that runs this one case the way it ran here (same implementation, profile,
        device, timeouts), so it reproduces the same outcome. It names the one implementation
        (an implementation's name is its --impl SPEC), so a case of a side-by-side run (node id
        ``...@impl``) runs alone under its plain id."""
        if family not in self.implementations():
            return f"pytest '{nodeid}'{self.options.repro_options()}"
        if nodeid.endswith(f"@{impl}"):
            nodeid = nodeid[:-len(impl) - 1]
        elif nodeid.endswith(f"@{impl}]"):  # a benchmark: test_bench[case id@impl]
            nodeid = nodeid[:-len(impl) - 2] + "]"
        from .impls import import_root

        # The directory the implementation's import needed, where a plain run would not find it.
        root = import_root(impl, self.options.rootdir or Path.cwd())
        env = f"PYTHONPATH={shlex.quote(str(root))} " if root is not None else ""
        return f"{env}pytest '{nodeid}'{self.options.repro_options()} --impl {family}={impl}"

    def library_info(self, family, impl: str) -> dict | None:
        """What a record says about the library behind an implementation (attnsuite/ecosystem):
        None for one with no ``.library`` (ours, a user's callable)."""
        from .ecosystem import library_info

        return library_info(dict(self.impls_for(family)).get(impl))

    def run_context(self, nodeid: str, param: CaseParam, mode: str | None = None) -> dict:
        return {"run_id": self.options.run_id, "nodeid": nodeid, "profile": self.options.profile,
                "mode": mode or param.mode, "worker": self.worker,
                "repro": self.repro(nodeid, param.family.name, param.impl),
                "library": self.library_info(param.family, param.impl),
                **self.repro_scripts.get((param.family.name, param.case.id, param.impl), {}),
                "known_failure": param.known.describe() if param.known else None}
