"""A suite option written with a space before a path (``--workloads DIR``, ``--trace-out DIR``),
as pytest users write options. pytest decides its rootdir and ini file from the command line's
paths before any plugin's options are known, so it takes DIR for a test path: with DIR outside
the checkout, the rootdir moves there and the project's ini (testpaths, pythonpath, addopts,
xfail_strict) is never read. Once the plugin is loaded, before any conftest
(``pytest_load_initial_conftests``), the rootdir and ini are decided again from the command
line as it parses now, which is what ``--workloads=DIR`` gives.

This reaches into pytest's config (no public hook decides the rootdir); on a pytest where that
does not work, the run stops with a message that says to write ``--option=DIR``."""
from __future__ import annotations

import copy
import inspect
from pathlib import Path

import pytest

from .options import value_options


def misread(args, takes_value) -> list[str]:
    """The values pytest took for test paths: an existing path after one of our options."""
    return [value for option, value in zip(args, args[1:])
            if option in takes_value and not value.startswith("-") and Path(value).exists()]


def settle(config, args: list[str]) -> None:
    """Decide the rootdir and ini again when a suite option's value was taken for a test path."""
    ns = config.known_args_namespace
    values = misread(args, value_options(config._parser))
    if not values or getattr(ns, "rootdir", None) or getattr(ns, "inifilename", None):
        return  # nothing misread, or the user chose the rootdir or the ini file
    try:
        _redo_setup(config, args, ns)
    except (AttributeError, TypeError, ImportError) as exc:
        option = next(o for o, v in zip(args, args[1:]) if v == values[0])
        raise pytest.UsageError(f"attnsuite: pytest took {values[0]} (the value of {option}) for a test path "
                                f"and this pytest cannot be corrected ({type(exc).__name__}: {exc}); write "
                                f"{option}={values[0]}") from None


def _redo_setup(config, args: list[str], ns) -> None:
    from _pytest.config.findpaths import determine_setup

    given = dict(inifile=None, override_ini=getattr(ns, "override_ini", None), args=list(ns.file_or_dir or []),
                 rootdir_cmd_arg=None, invocation_dir=Path(config.invocation_params.dir))
    accepted = inspect.signature(determine_setup).parameters
    rootpath, inipath, inicfg = determine_setup(**{k: v for k, v in given.items() if k in accepted})[:3]
    if rootpath == config.rootpath and inipath == config.inipath:
        return
    config._rootpath, config._inipath = rootpath, inipath
    if hasattr(config, "_inicfg"):
        config._inicfg = inicfg
    else:  # pytest 8
        config.inicfg = inicfg
    config._inicache.clear()
    config._parser.extra_info.update(rootdir=str(rootpath), inifile=str(inipath))
    addopts = list(config.getini("addopts") or [])
    if addopts:  # the ini's options, first, as pytest puts them
        args[:] = config._validate_args(addopts, "via addopts config") + args
        config.pluginmanager.consider_preparse(args, exclude_only=True)  # its -p no:NAME
    config.known_args_namespace = ns = config._parser.parse_known_args(args, namespace=copy.copy(config.option))
    config._configure_python_path()
    if ns.confcutdir is None:
        ns.confcutdir = str(inipath.parent if inipath is not None else rootpath)
