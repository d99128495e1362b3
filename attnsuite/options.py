"""The suite's command-line options, declared in one place and read once into ``RunOptions``."""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

from .case import PROFILES
from .devices import BACKENDS, device_class
from .flashinfer_trace.safetensors_index import MissingExtra, require

DEFAULT_LEDGER = "cases/known_failures.toml"


def add_options(parser) -> None:
    group = parser.getgroup("attnsuite", "attention kernel conformance")
    group.addoption("--device", choices=sorted(BACKENDS), default="cpu",
                    help="where kernels run: cpu (Triton interpreter, default), cuda, npu")
    group.addoption("--profile", choices=PROFILES, default=None,
                    help="case set: quick (small shapes; default on cpu and compile-only), full "
                         "(default on devices), fuzz (cases drawn at random: --fuzz-seed, --fuzz-count)")
    group.addoption("--fuzz-seed", type=int, default=0, help="fuzz profile: the seed cases are drawn from")
    group.addoption("--fuzz-count", type=int, default=50, help="fuzz profile: cases per family")
    group.addoption("--impl", action="append", default=[], metavar="FAMILY=MODULE:CALLABLE",
                    help="run FAMILY's cases against this callable (or registered name) instead of the "
                         "project's kernel; repeat to run several side by side. FAMILY=all: every "
                         "registered implementation of FAMILY (ours and every library adapter); a bare "
                         "'all': that for every family")
    group.addoption("--ledger", action="append", default=[], metavar="TOML",
                    help="an extra known-failure ledger (your kernels' known failures), read after the "
                         "project's own (cases/known_failures.toml); repeatable")
    group.addoption("--records-dir", default=None,
                    help="where this run's JSONL records go (default reports/runs/<run id>)")
    group.addoption("--report-html", default=None,
                    help="report written at session end (default reports/index.html; 'none' to skip)")
    group.addoption("--compile-only", action="store_true", default=False,
                    help="compile (never launch) every case's kernels for the device's targets; needs "
                         "no accelerator. cuda: upstream triton, --cuda-arch; npu: triton-ascend, --soc")
    group.addoption("--cuda-arch", default="80,90", help="compile-only CUDA targets (default 80,90)")
    group.addoption("--soc", default="Ascend910B2", help="compile-only Ascend target (default Ascend910B2)")
    group.addoption("--case-timeout", type=float, default=None,
                    help="seconds before a hung case is stopped and recorded as timeout (default 900 on "
                         "cpu, 300 elsewhere); a case stuck where signals cannot reach Python is ended "
                         "by a watchdog a little later and its worker replaced")
    group.addoption("--bench-runs", type=int, default=30,
                    help="benchmarks: timed runs per kernel and baseline (median and IQR over them)")
    group.addoption("--bench-method", choices=("auto", "cudagraph", "profiler", "events", "npu"),
                    default="auto",
                    help="benchmarks, device time: auto (default): graph replay, else the profiler's "
                         "kernel time for a call that cannot be captured; events: the old eager "
                         "timing (host time inside); npu: triton-ascend's profiler-based do_bench")
    group.addoption("--bench-l2", choices=("cold", "warm"), default="cold",
                    help="benchmarks: L2 state of every timed call (cold: flushed before each)")
    group.addoption("--bench-repeat", type=int, default=1, choices=(1, 2),
                    help="benchmarks: 2 times each kernel twice in the session and flags a "
                         "device-time spread over 10%% (bench.repeat)")
    group.addoption("--autotune", action="store_true", default=False,
                    help="GPU: time the tile candidates of every kernel shape not yet tuned and cache "
                         "the fastest (kernels.settings.autotune)")
    group.addoption("--kernel-path", choices=("auto", "portable", "fast"), default=None,
                    help="auto (default): backend fast paths on CUDA, portable kernels elsewhere; "
                         "portable: the portable kernels everywhere; fast: the fast paths, also "
                         "in the interpreter (kernels.settings.kernel_path)")
    group.addoption("--persistent-programs", type=int, default=None, metavar="N",
                    help="launch the suite's kernels on a persistent grid of at most N programs "
                         "looping over their tiles, on any device (the Ascend launch; 0: one "
                         "program per tile everywhere; default: persistent on Ascend only; "
                         "kernels.settings.persistent_programs)")
    # -- the order of a launch's programs under the interpreter (attnsuite/interpreted.py) --
    group.addoption("--program-order", default="grid", metavar="grid|reversed|shuffled[:SEED]",
                    help="cpu: run each interpreted launch's programs in the grid's order (default), "
                         "reversed, or shuffled by SEED, so a store into another program's rows "
                         "shows; the reproduction command of every record keeps it")
    group.addoption("--workloads", default=None, metavar="DIR",
                    help="also run the FlashInfer-Trace workloads under DIR (Definition .json + workload "
                         ".jsonl files; gqa_paged decode -> paged_decode, gqa_ragged prefill -> "
                         "prefill_varlen) as cases tagged 'workload' (ids fi-<definition>-<uuid>)")
    group.addoption("--trace-out", default=None, metavar="DIR",
                    help="at session end, write the workload cases' results as FlashInfer-Trace traces "
                         "under DIR (traces/<op_type>/<definition>.jsonl; definitions/ when missing)")
    parser.addini("attnsuite_ledger", "known-failure ledger (TOML), relative to the rootdir",
                  default=DEFAULT_LEDGER)
    parser.addini("attnsuite_families", "the family registry package (default: cases)", default="cases")


def joined_option_values(args, takes_value) -> list[str]:
    """``args`` with every ``--option value`` of the options in ``takes_value`` written
    ``--option=value``. pytest finds its rootdir (and so this plugin's conftest) from the command
    line's existing paths before it knows the plugin's options: an existing records directory
    after ``--records-dir`` reads as a test path, the rootdir moves there, and the options are
    "unrecognized". xdist starts a worker that replaces a crashed one from these arguments after
    the run has created that directory."""
    out, it = [], iter(args)
    for arg in it:
        if arg in takes_value:
            value = next(it, None)
            out.append(arg if value is None else f"{arg}={value}")
        else:
            out.append(arg)
    return out


def value_options(parser) -> set[str]:
    """The suite's long options that take a value."""
    flags = ("store_true", "store_false", "count")

    def takes_value(attrs: dict) -> bool:  # an argparse action's __dict__, or pytest's older attrs
        return attrs.get("nargs") != 0 and attrs.get("action") not in flags

    return {name for opt in parser.getgroup("attnsuite").options if takes_value(opt.attrs())
            for name in opt.names() if name.startswith("--")}


def _persistent_programs(config) -> int | None:
    n = config.getoption("persistent_programs")
    if n is not None and n < 0:
        raise OptionError(f"--persistent-programs must be >= 0, got {n}")
    return n


def _ledger_path(config) -> Path | None:
    """The ini's ledger; the default one may be absent (a project of its own families, run with
    ``attnsuite_families``, need not keep a ledger), a ledger the ini names may not."""
    name = config.getini("attnsuite_ledger")
    path = config.rootpath / name
    return None if name == DEFAULT_LEDGER and not path.exists() else path


@dataclass(frozen=True)
class RunOptions:
    device_kind: str
    profile: str
    compile_targets: tuple[str, ...]
    impl_specs: tuple[str, ...]
    case_timeout: float
    run_id: str
    run_dir: Path
    report_path: Path | None
    #: None: no ledger of the project's own (a registry of other families and no ledger file).
    ledger_path: Path | None
    registry: str
    #: Extra ledgers from --ledger, read after ``ledger_path`` (the first matching entry wins).
    extra_ledgers: tuple[Path, ...] = ()
    fuzz_seed: int = 0
    fuzz_count: int = 50
    bench_runs: int = 30
    bench_method: str = "auto"
    bench_l2: str = "cold"
    bench_repeat: int = 1
    kernel_path: str | None = None
    autotune: bool = False
    persistent_programs: int | None = None
    #: --workloads: a FlashInfer-Trace dataset whose workloads run as extra cases.
    workloads: Path | None = None
    #: --trace-out: where the workload cases' results go as FlashInfer-Trace traces.
    trace_out: Path | None = None
    #: Where ``--impl`` imports look after ``sys.path``: the invocation directory and the rootdir.
    import_dirs: tuple[Path, ...] = ()
    rootdir: Path | None = None
    #: --program-order: the order the interpreter runs a launch's programs in.
    program_order: str = "grid"

    @property
    def mode(self) -> str:
        return "compile" if self.compile_targets else "numeric"

    def repro_options(self) -> str:
        """The options that make a single case run the way it ran in this session."""
        extra = f" --device {self.device_kind} --profile {self.profile}"
        if self.profile == "fuzz":
            extra += f" --fuzz-seed {self.fuzz_seed} --fuzz-count {self.fuzz_count}"
        if self.compile_targets:
            extra += " --compile-only " + device_class(self.device_kind).compile_target_options(self.compile_targets)
        if self.kernel_path:
            extra += f" --kernel-path {self.kernel_path}"
        if self.persistent_programs is not None:
            extra += f" --persistent-programs {self.persistent_programs}"
        for path in self.extra_ledgers:
            extra += f" --ledger {path}"
        if self.workloads is not None:
            extra += f" --workloads={self.workloads}"
        if self.program_order != "grid":
            extra += f" --program-order {self.program_order}"
        extra += f" --case-timeout {self.case_timeout:g}"
        return extra


class OptionError(ValueError):
    pass


def compile_targets(kind: str, cuda_arch: str, soc: str) -> tuple[str, ...]:
    """The compile-only targets of a device kind, after checking this environment's compiler."""
    from .compile import toolchain

    cls = device_class(kind)
    try:
        targets = cls.compile_targets(cuda_arch, soc)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    want = cls.compile_toolchain
    if toolchain.installed() != want:
        need = "upstream triton" if want == "upstream" else "triton-ascend (tox -e npu-compile)"
        raise OptionError(f"--device {kind} --compile-only: needs {need}; this environment has "
                          f"{toolchain.describe()}")
    return tuple(targets)


def read_options(config, workerinput: dict | None) -> RunOptions:
    kind = config.getoption("device")
    if workerinput and "attnsuite_run_id" in workerinput:
        # The controller's --records-dir as given, resolved here: a worker on another host or in
        # another working directory keeps its cache in its own tree (attnsuite/transport.py).
        run_id, given = workerinput["attnsuite_run_id"], workerinput.get("attnsuite_records_dir")
        run_dir = Path(given) if given else config.rootpath / "reports" / "runs" / run_id
    else:
        run_id = f"{kind}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        records = config.getoption("records_dir")
        run_dir = Path(records) if records else config.rootpath / "reports" / "runs" / run_id
    report = config.getoption("report_html")
    report_path = None if report == "none" else Path(report or config.rootpath / "reports" / "index.html")
    targets = (compile_targets(kind, config.getoption("cuda_arch"), config.getoption("soc"))
               if config.getoption("compile_only") else ())
    cls = device_class(kind)
    return RunOptions(
        device_kind=kind,
        profile=config.getoption("profile") or cls.default_profile(bool(targets)),
        compile_targets=targets,
        impl_specs=tuple(config.getoption("impl") or ()),
        case_timeout=config.getoption("case_timeout") or cls.case_timeout_s,
        run_id=run_id, run_dir=run_dir, report_path=report_path,
        ledger_path=_ledger_path(config),
        extra_ledgers=tuple(Path(p) for p in config.getoption("ledger") or ()),
        registry=config.getini("attnsuite_families") or "cases",
        fuzz_seed=config.getoption("fuzz_seed"), fuzz_count=config.getoption("fuzz_count"),
        bench_runs=config.getoption("bench_runs"), bench_method=config.getoption("bench_method"),
        bench_l2=config.getoption("bench_l2"), bench_repeat=config.getoption("bench_repeat"),
        kernel_path=config.getoption("kernel_path"), autotune=bool(config.getoption("autotune")),
        persistent_programs=_persistent_programs(config),
        workloads=_path_option(config, "workloads"), trace_out=_path_option(config, "trace_out"),
        import_dirs=(Path(config.invocation_params.dir), Path(config.rootpath)), rootdir=Path(config.rootpath),
        program_order=_program_order(config),
    )


def _program_order(config) -> str:
    """--program-order, checked, and set in this process (every process reads its options here,
    xdist workers included, before any case runs)."""
    from . import interpreted

    try:
        spec = interpreted.parse_program_order(config.getoption("program_order") or "grid")
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    interpreted.set_program_order(spec)
    return spec


def _path_option(config, name: str) -> Path | None:
    """A directory option, absolute (xdist workers may run elsewhere; records name it)."""
    value = config.getoption(name)
    if not value:
        return None
    path = Path(value).resolve()
    try:  # the FlashInfer-Trace options read and write that format: the 'trace' extra
        require(f"--{name.replace('_', '-')}")
    except MissingExtra as exc:
        raise OptionError(str(exc)) from None
    if name == "workloads" and not path.is_dir():
        raise OptionError(f"--workloads {value}: not a directory (a FlashInfer-Trace dataset, or a folder of its "
                          "Definition .json and workload .jsonl files)")
    return path
