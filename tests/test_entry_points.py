"""The command-line entry points (``python -m attnsuite.bench.profile``, ``python -m
attnsuite.mutate``) take their families from the registry, pass over a family they have nothing
for with the reason (a family without a mutants catalog, without bench cases, without an
implementation), and stop in one line, not a traceback, where there is no GPU."""
from __future__ import annotations

import types

import pytest

from attnsuite import mutate, registry
from attnsuite.bench import profile


def test_profile_without_a_gpu_stops_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(profile.torch.cuda, "is_available", lambda: False)
    assert profile.main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("python -m attnsuite.bench.profile: needs a CUDA GPU; torch ")


def test_profile_refuses_an_unknown_family_before_looking_for_a_gpu(capsys):
    with pytest.raises(SystemExit) as stop:
        profile.main(["no_such_family"])
    assert stop.value.code == 2
    assert "unknown family 'no_such_family'; registered: " + ", ".join(registry.names()) in capsys.readouterr().err


def test_profile_says_why_a_family_has_nothing_to_profile():
    case = types.SimpleNamespace(tags=("bench",), id="fp16-x")
    with_cases = types.SimpleNamespace(impls={"triton": print}, cases=[case])
    assert profile._cases(with_cases, "bench", "") == ([case], None)
    assert profile._cases(with_cases, "bench", "bf16") == ([], "no case tagged 'bench' matching 'bf16'")
    assert profile._cases(with_cases, "sweep", "") == ([], "no case tagged 'sweep'")
    assert profile._cases(types.SimpleNamespace(impls={}, cases=[case]), "bench", "")[1] == \
        "no implementation to profile"


def test_mutate_runs_every_registered_family_with_a_catalog_and_says_which_it_leaves_out(monkeypatch):
    families, left_out = mutate.families_with_catalogs()
    assert families == mutate.FAMILIES
    assert set(families) | set(left_out) == set(registry.names()) and not set(families) & set(left_out)
    assert all(mutate.has_catalog(f) for f in families)
    # A family registered a moment ago, with no mutants/<family>.py yet: left out, saying so.
    monkeypatch.setattr(registry, "names", lambda package=registry.DEFAULT_PACKAGE: (*families, "new_family"))
    families_now, left_out_now = mutate.families_with_catalogs()
    assert families_now == families
    assert left_out_now["new_family"] == "no mutants catalog (mutants/new_family.py)"


def test_mutate_refuses_a_named_family_without_a_catalog(capsys, monkeypatch):
    monkeypatch.setattr(registry, "names", lambda package=registry.DEFAULT_PACKAGE: (*mutate.FAMILIES, "new_family"))
    with pytest.raises(SystemExit) as stop:
        mutate.main(["new_family"])
    assert stop.value.code == 2
    assert "new_family: no mutants catalog (mutants/new_family.py)" in capsys.readouterr().err
