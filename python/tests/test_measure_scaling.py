"""measure.scaling's pieces that do not need a run: the worker counts for a
machine, where the workers go, the goal's verdict, and the live multi-queue
helpers' parsing of tcpreplay and ethtool."""

from __future__ import annotations

import pytest

from dpukit.experiments import measure as m
from dpukit import measure_queues as q


@pytest.mark.parametrize("cores, counts", [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]),
                                           (16, [1, 2, 4, 8, 16])])
def test_worker_counts_double_up_to_the_cores(cores, counts):
    assert m.worker_counts(cores) == counts


def test_workers_get_a_cpu_each_past_the_first_where_there_are_enough():
    assert m.scaling_cpus(1, [0, 1]) == "1"
    assert m.scaling_cpus(2, [0, 1]) == "0,1", "2 workers on 2 CPUs: one shares with the host side"
    assert m.scaling_cpus(8, list(range(16))) == "1,2,3,4,5,6,7,8"
    assert m.scaling_cpus(16, list(range(16))) == ",".join(str(c) for c in range(16))
    assert m.scaling_cpus(2, [3, 5, 7]) == "5,7", "the CPUs the process may use, not 0..n"


def test_duet_runs_with_its_sketch_partitioned_and_shared():
    assert m.scaling_algo_args("duet") == ["--algo", "duet"], "the default: a partition per worker"
    assert m.scaling_algo_args("duet-shared") == ["--algo", "duet", "--duet-sketch", "shared"]
    assert m.scaling_algo_args("cms") == ["--algo", "cms"]
    assert {"duet", "duet-shared"} <= set(m.SCALING_QUICK) <= set(m.SCALING_ALGOS)


def test_the_goal_is_judged_only_where_each_worker_has_a_cpu():
    rates = {1: 10.0, 2: 17.0, 4: 30.0, 8: 70.0, 16: 90.0}
    # 16 is the core count: left out; 4 reaches 0.75 x 4 x 10.
    assert m.scaling_verdict(rates, 16, {1, 2, 4, 8}) == "missed (worst 0.750 of N × 1 worker)"
    assert m.scaling_verdict({1: 10.0, 2: 16.0, 4: 32.0}, 8, {1, 2, 4}) == "met (worst 0.800 of N × 1 worker)"
    assert m.scaling_verdict({1: 10.0, 2: 5.0}, 2, {1}) == "cannot be checked here"
    assert m.scaling_verdict({1: 0.0, 2: 5.0}, 4, {1, 2}) == "cannot be checked here"


def test_tcpreplay_summary_is_parsed():
    out = ("Actual: 300000 packets (19200000 bytes) sent in 2.02 seconds\n"
           "Rated: 9498118.4 Bps, 75.98 Mbps, 148408.10 pps\n")
    assert q.parse_tcpreplay(out) == (300000, 2.02)
    with pytest.raises(ValueError, match="Actual"):
        q.parse_tcpreplay("Warning: nothing sent\n")


def test_veth_queue_counters_are_parsed():
    text = ("NIC statistics:\n     peer_ifindex: 244\n     rx_queue_0_xdp_packets: 17952\n"
            "     rx_queue_0_xdp_redirect: 7264\n     rx_queue_1_xdp_packets: 12053\n"
            "     rx_queue_1_drops: 0\n     tx_queue_0_xdp_xmit: 0\n")
    assert q.parse_queue_counters(text) == {0: {"xdp_packets": 17952, "xdp_redirect": 7264},
                                            1: {"xdp_packets": 12053, "drops": 0}}
