"""``bench.distributed._Usage``: the CPU the load runs and the drill's drain print per
execution is the difference of two readings; a backend gone between them (an autovacuum
worker) is the server's total less the live ones."""

from __future__ import annotations

from bench.distributed import _Usage


def test_an_interval_is_the_difference_of_two_readings_and_exited_backends_the_rest() -> None:
    before = _Usage({"worker-1": 1.0, "leader": 0.5}, 10.0, {7: ("bench-worker-1", 2.0)}, (100.0, 400.0))
    after = _Usage(
        {"worker-1": 4.0, "leader": 0.75},
        20.0,
        {7: ("bench-worker-1", 8.0), 9: ("autovacuum worker", 1.0)},
        (300.0, 800.0),
    )
    procs, server, by_label, busy = after.since(before)
    assert procs == {"worker-1": 3.0, "leader": 0.25}
    assert server == 10.0
    # 6 s in the worker's backend, 1 s in a backend born in the interval, 3 s in ones gone.
    assert by_label == {"bench-worker-1": 6.0, "autovacuum worker": 1.0, "exited backends (autovacuum workers…)": 3.0}
    assert busy == 0.5


def test_a_server_on_another_machine_gives_no_server_figures() -> None:
    before = _Usage({"worker-1": 1.0}, None, {}, (0.0, 100.0))
    after = _Usage({"worker-1": 2.0}, None, {}, (50.0, 200.0))
    assert after.since(before) == ({"worker-1": 1.0}, None, {}, 0.5)
