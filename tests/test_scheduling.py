"""attnsuite/scheduling.py: a device run's cases ordered by kernel specialization, handed out in
contiguous ranges."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from attnsuite.scheduling import contiguous_scheduler, order_for_compiles, specialization_key, tolerate_dead_workers


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


class _Channel:
    def __init__(self):
        self.sent, self.dead = [], False

    def send(self, item):
        if self.dead:
            raise OSError("cannot send (already closed?)")
        self.sent.append(item)


def _worker(name):
    from xdist.workermanage import WorkerController

    node = WorkerController.__new__(WorkerController)  # no gateway: only what the scheduler touches
    node.channel, node._down, node._shutdown_sent = _Channel(), False, False
    node.log = lambda *args: None
    node.gateway = SimpleNamespace(id=name)
    return node


@pytest.mark.parametrize("scheduler", ["LoadScheduling", "WorkStealingScheduling"])
@pytest.mark.parametrize("guarded", [True, False])
def test_two_workers_dying_together_lose_no_case_and_raise_nothing(scheduler, guarded):
    """xdist's own scheduler, driven through a worker's death while the other worker is already
    dead and its death not yet handled: without the guard the hand-over raises OSError (the run
    would end in INTERNALERROR); with it, each dead worker's running case comes back as its
    crash and every other case stays pending (not_run), none lost."""
    from xdist import scheduler as xdist_scheduler

    config = SimpleNamespace(option=SimpleNamespace(tx=["popen"] * 2, numprocesses=2),
                             getvalue=lambda name: {"tx": ["popen"] * 2, "numprocesses": 2}.get(name),
                             getoption=lambda name, default=None: {"tx": ["popen"] * 2, "maxschedchunk": None}.get(
                                 name, default))
    sched = getattr(xdist_scheduler, scheduler)(config)
    ids = [f"t{i}" for i in range(40)]
    a, b = _worker("gw0"), _worker("gw1")
    for node in (a, b):
        if guarded:
            tolerate_dead_workers(node)
        sched.add_node(node)
        sched.add_node_collection(node, ids)
    sched.schedule()
    done = sched.node2pending[b][:-1]  # gw1 is through all but one of its share ...
    del sched.node2pending[b][:-1]
    b.channel.dead = True  # ... and dies on that one; its errordown is still queued behind gw0's
    if not guarded:  # shows the drive reaches the race; an xdist that fixed it makes this moot
        try:
            sched.remove_node(a)
        except OSError:
            return
        pytest.skip("this xdist no longer sends a dead worker's cases to another dead worker")
    crashed = [sched.remove_node(a), sched.remove_node(b)]
    assert None not in crashed and len(set(crashed)) == 2
    assert sorted([ids.index(c) for c in crashed] + sched.pending + done) == list(range(len(ids)))

