"""attnsuite/scheduling.py: a device run's cases ordered by kernel specialization, handed out in
contiguous ranges."""
from __future__ import annotations

from types import SimpleNamespace

from attnsuite.scheduling import contiguous_scheduler, order_for_compiles, specialization_key


def test_sizes_do_not_change_the_key_and_variants_do():
    base = dict(dtype="fp16", B=1, Hq=8, Hkv=2, S=100, D=64, causal=True, layout="HND")
    assert specialization_key("paged", base) == specialization_key("paged", {**base, "B": 3, "S": 7000, "Hq": 4})
    for change in ({"dtype": "bf16"}, {"D": 128}, {"causal": False}, {"layout": "NHD"}):
        assert specialization_key("paged", base) != specialization_key("paged", {**base, **change})
    assert specialization_key("paged", base) != specialization_key("decode", base)


def test_order_groups_equal_keys_keeps_family_order_and_is_stable():
    items = ["a1", "b1", "a2", "x", "c1", "b2", "a3"]
    keys = {"a1": ("fam1", "k1"), "a2": ("fam1", "k2"), "a3": ("fam1", "k1"),
            "b1": ("fam0", "k"), "b2": ("fam0", "k"), "c1": ("fam1", "k1"), "x": None}
    order_for_compiles(items, keys.get)
    # fam1 was seen first; within it k1's cases together, in their order; items without a key first.
    assert items == ["x", "a1", "c1", "a3", "a2", "b1", "b2"]


def test_the_work_stealing_scheduler_replaces_only_plain_load():
    def config(dist):
        return SimpleNamespace(option=SimpleNamespace(dist=dist, tx=["popen"] * 2, numprocesses=2),
                               getvalue=lambda name: {"tx": ["popen"] * 2, "numprocesses": 2}.get(name),
                               getoption=lambda name, default=None: {"tx": ["popen"] * 2}.get(name, default))
    assert contiguous_scheduler(config("loadscope"), None) is None
    assert contiguous_scheduler(config("no"), None) is None
    scheduler = contiguous_scheduler(config("load"), None)
    assert type(scheduler).__name__ == "WorkStealingScheduling"


def test_auto_workers_one_per_core_at_most_sixteen_per_device():
    from attnsuite.scheduling import WORKERS_PER_DEVICE, auto_workers

    assert auto_workers(16, 1) == 16
    assert auto_workers(64, 1) == WORKERS_PER_DEVICE == 16
    assert auto_workers(128, 8) == 128
    assert auto_workers(4, 2) == 4
    assert auto_workers(1, 0) == 1


def test_dash_n_auto_on_a_device_asks_the_plugin(monkeypatch):
    """The hook answers for device runs only; the interpreter keeps xdist's own count."""
    from attnsuite import plugin

    class Config:
        def __init__(self, device, compile_only=False):
            self.values = {"device": device, "compile_only": compile_only}

        def getoption(self, name):
            return self.values[name]

    class TwoCards:
        @classmethod
        def visible_count(cls):
            return 2

    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(plugin, "device_class", lambda kind: TwoCards)
    monkeypatch.setattr(plugin, "usable_cpus", lambda: 48)
    assert plugin.pytest_xdist_auto_num_workers(Config("cuda")) == 32
    assert plugin.pytest_xdist_auto_num_workers(Config("cpu")) is None
    assert plugin.pytest_xdist_auto_num_workers(Config("cuda", compile_only=True)) is None
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert plugin.pytest_xdist_auto_num_workers(Config("cuda")) is None
