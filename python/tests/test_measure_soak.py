"""measure.soak's pure parts: /metrics and nfdump parsing, a wave's estimate
error, the flatness rule; and a wave as the soak prepares it (gen --preset
churn, its truth read back by the tool)."""

from __future__ import annotations

import math

import pytest

from dpukit.experiments import measure_soak as ms

METRICS = """\
# HELP dpukit_measure_packets_total Packets measured, by place
# TYPE dpukit_measure_packets_total counter
dpukit_measure_packets_total{place="hw",algo="duet"} 1200
dpukit_measure_packets_total{place="dpu",algo="duet"} 800
dpukit_measure_hw_entries 37
dpukit_measure_duet_records_used 2666
dpukit_measure_duet_records_full_total 1.5e3
dpukit_measure_top_flow_packets{flow="1.2.3.4:5->6.7.8.9:10/6"} 99
dpukit_measure_top_flow_packets{flow="a\\"b"} 1
"""


def test_parse_metrics_reads_names_labels_and_values():
    m = ms.parse_metrics(METRICS)
    assert ms.metric(m, "dpukit_measure_hw_entries") == 37
    assert ms.metric(m, "dpukit_measure_duet_records_full_total") == 1500
    assert ms.metric(m, "dpukit_measure_packets_total", place="hw") == 1200
    assert ms.metric(m, "dpukit_measure_packets_total", place="dpu", algo="duet") == 800
    assert ms.metric(m, "dpukit_measure_packets_total") == 2000  # every label set, summed
    assert ms.metric(m, "dpukit_measure_packets_total", place="nic") is None
    assert ms.metric(m, "dpukit_measure_duet_records") is None  # a prefix of another name is not it
    flows = [ls["flow"] for ls, _ in m["dpukit_measure_top_flow_packets"]]
    assert flows == ["1.2.3.4:5->6.7.8.9:10/6", 'a\\"b']


@pytest.mark.parametrize("bad", ["dpukit_measure_hw_entries", "dpukit_measure_hw_entries lots",
                                 "{place=\"hw\"} 3"])
def test_parse_metrics_refuses_what_is_not_a_sample(bad):
    with pytest.raises(ValueError, match="line 2"):
        ms.parse_metrics("# fine\n" + bad + "\n")


def test_parse_nfdump_sums_per_flow():
    text = ("  10.0.0.1,  10.0.0.2, 40000,   443,   TCP,    70\n"
            "10.0.0.3,10.0.0.4,53,53,UDP,5\n"
            "\n"
            "10.0.0.1,10.0.0.2,40000,443,TCP,28\n"
            "10.0.0.5,10.0.0.6,1,2,47,3\n")
    assert ms.parse_nfdump(text) == {("10.0.0.1", "10.0.0.2", 40000, 443, 6): 98,
                                     ("10.0.0.3", "10.0.0.4", 53, 53, 17): 5,
                                     ("10.0.0.5", "10.0.0.6", 1, 2, 47): 3}
    with pytest.raises(ValueError, match="5 fields"):
        ms.parse_nfdump("10.0.0.1,10.0.0.2,1,2,TCP\n")


def test_wave_error_is_relative_and_counts_a_missing_flow_as_one():
    a, b, c, d = (("10.0.0.%d" % i, "10.0.1.1", 1, 2, 6) for i in range(4))
    truth = {a: 100, b: 100, c: 50, d: 98}
    exported = {a: 100, b: 110, c: 45, ("9.9.9.9", "1.1.1.1", 1, 2, 6): 1000}  # d never exported
    e = ms.wave_error(truth, exported)
    assert e.flows == 4 and e.missing == 1 and e.above_tenth == 1  # 0.1 itself is not above
    assert e.max == 1.0
    assert e.median == pytest.approx((0.1 + 0.1) / 2)  # errors 0, 0.1, 0.1, 1
    assert ms.wave_error({a: 100}, {a: 100}).max == 0
    with pytest.raises(ValueError):
        ms.wave_error({}, exported)


def test_slope_is_least_squares():
    assert ms.slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2)
    assert ms.slope([0, 1, 2, 3], [0, 1, 0, 1]) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        ms.slope([1, 1], [0, 5])


def test_flatness_judges_the_second_half():
    xs = [5.0 * i for i in range(361)]  # 30 minutes, every 5 s
    # A plateau after a ramp (records filling during the first waves): flat.
    plateau = [min(x, 60) * 10 for x in xs]
    f = ms.flatness(xs, plateau, floor=100)
    assert f is not None and f.flat and f.change == pytest.approx(0, abs=1e-9)
    assert f.first_per_hour > 0 and f.second_per_hour == pytest.approx(0, abs=1e-6)
    # A steady climb of 1 % of the level per minute: not flat, and the rate per hour is exact.
    climb = [1000 + 10 * x / 60 for x in xs]
    f = ms.flatness(xs, climb, floor=100)
    assert f is not None and not f.flat
    assert f.second_per_hour == pytest.approx(600) and f.first_per_hour == pytest.approx(600)
    assert f.change == pytest.approx(10 * 900 / 60)
    # Noise around a level is flat; a sawtooth of waves too.
    saw = [500 + (100 if int(x // 10) % 2 else -100) for x in xs]
    assert ms.flatness(xs, saw, floor=100).flat


def test_flatness_tolerance_has_a_floor_and_needs_samples():
    xs = [0.0, 1.0, 2.0, 3.0]
    # Near-zero errors: 5 % of the floor (0.2), not of the mean, so 0.005 -> 0.012 is flat ...
    f = ms.flatness(xs, [0.0, 0.0, 0.005, 0.012], floor=0.2)
    assert f.tolerance == pytest.approx(0.01) and f.flat
    # ... and 0.005 -> 0.05 is not.
    assert not ms.flatness(xs, [0.0, 0.0, 0.005, 0.05], floor=0.2).flat
    assert ms.flatness([0.0, 1.0, 2.0], [1, 2, 3], floor=1) is None
    assert ms.flatness([], [], floor=1) is None
    with pytest.raises(ValueError):
        ms.flatness([0.0, 1.0], [1.0], floor=1)


def test_read_truth_keeps_the_heavy_flows(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("src_ip,dst_ip,src_port,dst_port,proto,true_count,estimate\n"
                   "1.1.1.1,2.2.2.2,10,20,6,50,0\n"
                   "1.1.1.1,2.2.2.3,10,20,17,49,0\n")
    assert ms.read_truth(csv, 50) == {("1.1.1.1", "2.2.2.2", 10, 20, 6): 50}


def test_a_wave_as_the_soak_prepares_it(measure_tool, tmp_path):
    """Waves 0 and 1 as the soak writes them: each with its tenth of heavy flows at equal counts
    (read back by the tool's own parser), and no flow in both."""
    waves = [ms.prepare_wave(tmp_path, measure_tool, k) for k in (0, 1)]
    heavy = ms.WAVE_FLOWS // 10
    packets = ms.RATE * ms.WAVE_SECONDS
    per_flow = round(ms.HEAVY_SHARE * packets) / heavy
    for pcap, truth in waves:
        assert pcap.is_file()
        assert len(truth) == heavy
        assert set(truth.values()) <= {math.floor(per_flow), math.ceil(per_flow)}
        assert sum(truth.values()) == round(ms.HEAVY_SHARE * packets)
        assert min(truth.values()) >= 1.5 * ms.TOP  # each is promoted well before its wave ends
    assert not set(waves[0][1]) & set(waves[1][1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wave-0.pcap", "wave-1.pcap"]


def test_health_checks_flag_records_running_out_and_missing_flows():
    a = ("10.0.0.1", "10.0.0.2", 1, 2, 6)
    healthy = [{"records_used": 0, "records_full": 0}, {"records_used": 900, "records_full": 0}]
    ok = ms.health_checks(healthy, 2666, [(10.0, ms.wave_error({a: 98}, {a: 98}))])
    assert [passed for _, _, passed in ok] == [True, True, True]
    assert ok[0][1] == "at most 900 of 2,666"
    before = [{"records_used": 2666, "records_full": 0}, {"records_used": 2666, "records_full": 4711}]
    bad = ms.health_checks(before, 2666, [(10.0, ms.wave_error({a: 98}, {}))])
    assert [passed for _, _, passed in bad] == [False, False, False]
    assert bad[1][1] == "4,711 packets at the end" and bad[2][1] == "0 of 1"
    # Without the gauges (an algorithm without records), only what can be checked.
    assert [c for c, _, _ in ms.health_checks([{"rss_kib": 1}], None, [])] == ["every heavy flow is exported"]


def test_hw_shares_are_per_interval():
    samples = [{"seconds": 0, "packets_hw": 0, "packets_dpu": 0},
               {"seconds": 5, "packets_hw": 400, "packets_dpu": 600},
               {"seconds": 10, "packets_hw": 400, "packets_dpu": 1600},   # nothing in hardware any more
               {"seconds": 15, "packets_hw": 400, "packets_dpu": 1600},   # idle: no point
               {"seconds": 20, "packets_hw": None, "packets_dpu": 1700}]  # a scrape without the counter
    assert ms.hw_shares(samples) == [(5, 0.4), (10, 0.0)]


def test_flat_rows_leave_out_the_drain_after_the_last_wave():
    """Records and entries go to 0 once the waves stop, as they should: that is not a trend."""
    a = ("10.0.0.1", "10.0.0.2", 1, 2, 6)
    samples = [{"seconds": float(t), "rss_kib": 20000, "records_used": 450 + (t % 2) * 20,
                "hw_entries": 400 + (t % 2) * 10} for t in range(0, 300, 3)]
    samples.append({"seconds": 305.0, "rss_kib": 20000, "records_used": 0, "hw_entries": 0})
    waves = [ms.Wave(k, k * ms.WAVE_FLOWS, 10.0 * k, 10.0 * k + 10, 60000, {a: 98}) for k in range(30)]
    run = ms.SoakRun(300, waves, samples, {a: 98}, {}, "", [], [])
    rows = {label: fl for label, _, fl in ms.flat_rows(run, [(w.end, ms.wave_error(w.truth, run.exported))
                                                            for w in waves])}
    assert rows["Duet records in use"].flat and rows["hardware entries"].flat, rows
    assert rows["live process RSS"].flat and rows["median relative error per wave"].flat
    # With the drain counted, the same run would look like a fall.
    assert not ms.flatness([s["seconds"] for s in samples], [s["records_used"] for s in samples], 100).flat


def test_wave_peaks_judge_a_sawtooth_by_its_peaks():
    a = ("10.0.0.1", "10.0.0.2", 1, 2, 6)
    waves = [ms.Wave(k, k * ms.WAVE_FLOWS, 10.1 * k, 10.1 * k + 10, 60000, {a: 98}) for k in range(40)]
    # Records climb to 550 in each wave and fall as it ages; samples every 3 s land on
    # different phases of it, so the sampled series wanders while its peaks do not.
    def records(t, grow=0.0):
        phase = t % 10.1
        return (550 + grow * t) * min(phase, 10) / 10
    samples = [{"seconds": float(t), "records_used": records(t)} for t in range(0, 404, 3)]
    peaks = ms.wave_peaks(samples, waves, "records_used")
    assert len(peaks) == 40 and peaks[0][0] == 10
    assert ms.flatness([x for x, _ in peaks], [y for _, y in peaks], 100).flat
    # Peaks that climb (records not given back) are not flat.
    leaking = [{"seconds": float(t), "records_used": records(t, grow=1.0)} for t in range(0, 404, 3)]
    peaks = ms.wave_peaks(leaking, waves, "records_used")
    assert not ms.flatness([x for x, _ in peaks], [y for _, y in peaks], 100).flat
    # The rows carry both.
    run = ms.SoakRun(404, waves, samples, {a: 98}, {}, "", [], [])
    labels = [label for label, _, _ in ms.flat_rows(run, [])]
    assert "Duet records in use, peak per wave" in labels and "hardware entries, peak per wave" in labels
