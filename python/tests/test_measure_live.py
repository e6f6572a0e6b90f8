"""dpukit-measure live on a real interface: a pcap replayed by tcpreplay from
another network namespace into a veth pair, measured by the XDP hardware tier
and the AF_XDP dpu workers, against the offline run of the same pcap; the
heavy flows read back from a real IPFIX collector (nfcapd); /metrics scraped
during the run. Needs root, ip, tcpreplay and nfdump (CI installs them):
otherwise skipped with the reason."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from conftest import native_tool
from dpukit.procs import free_udp_port
from live_support import RATE, live_over, make_pcap, replay, stop, veth, wait_attached  # noqa: F401 (veth: the fixture)

PACKETS = 30000
TOP = 100  # heavy threshold in packets


def read_csv_truth(path: Path) -> dict[str, tuple[int, float]]:
    """flow (as the tool prints it) -> (true count, offline estimate)."""
    out = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            key = f"{row['src_ip']}:{row['src_port']}->{row['dst_ip']}:{row['dst_port']}/{row['proto']}"
            out[key] = (int(row["true_count"]), float(row["estimate"]))
    return out


def offline_duet(exe: Path, pcap: Path, tmp_path: Path, *extra: str) -> tuple[dict, dict[str, tuple[int, float]]]:
    """The offline Duet run of ``pcap``: its figures and, per flow, (true count, estimate)."""
    offline_json, offline_csv = tmp_path / "offline.json", tmp_path / "offline.csv"
    subprocess.run([str(exe), "run", "--trace", str(pcap), "--algo", "duet", "--heavy-threshold", str(TOP), *extra,
                    "--json", str(offline_json), "--dump-estimates", str(offline_csv)],
                   check=True, capture_output=True, timeout=120)
    return json.loads(offline_json.read_text())["figures"], read_csv_truth(offline_csv)


def start_nfcapd(tmp_path: Path) -> tuple[subprocess.Popen, Path, int]:
    """An IPFIX collector on a free local port: the process, its directory, the port."""
    flows_dir = tmp_path / "flows"
    flows_dir.mkdir()
    port = free_udp_port()
    nfcapd = subprocess.Popen(["nfcapd", "-w", str(flows_dir), "-b", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return nfcapd, flows_dir, port


def stop_nfcapd(nfcapd: subprocess.Popen) -> None:
    time.sleep(0.5)  # the last datagrams
    nfcapd.send_signal(signal.SIGTERM)
    nfcapd.wait(timeout=30)


def nfdump_sums(flows_dir: Path) -> tuple[dict[str, int], int]:
    """What the collector holds, as nfdump reads it: packets per flow over every record, and the records."""
    dump = subprocess.run(["nfdump", "-R", str(flows_dir), "-N", "-q", "-o", "fmt:%sa,%da,%sp,%dp,%pr,%pkt"],
                          capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0, dump.stderr
    exported: dict[str, int] = {}
    records = 0
    for line in dump.stdout.splitlines():
        sa, da, sp, dp, pr, pkt = [x.strip() for x in line.split(",")]
        proto = {"TCP": "6", "UDP": "17"}.get(pr, pr)
        key = f"{sa}:{sp}->{da}:{dp}/{proto}"
        exported[key] = exported.get(key, 0) + int(pkt)
        records += 1
    return exported, records


def test_live_duet_against_offline_with_ipfix_and_metrics(veth, tmp_path):
    _, _, measured = veth
    exe = native_tool("dpukit-measure")
    pcap = make_pcap(exe, tmp_path, PACKETS)
    # The offline run of the same pcap at the rate tcpreplay sends it (how many
    # packets a flow sends while its insertion is under way depends on it):
    # the exact counts and its hardware share.
    offline, truth = offline_duet(exe, pcap, tmp_path, "--rate", str(RATE))
    nfcapd, flows_dir, port = start_nfcapd(tmp_path)
    live_json = tmp_path / "live.json"
    live = subprocess.Popen([str(exe), "live", "--iface", measured, "--algo", "duet", "--heavy-threshold", str(TOP),
                             "--duration", "120", "--ipfix", f"127.0.0.1:{port}", "--export-interval", "0.3",
                             "--metrics", "127.0.0.1:0", "--all-flows",
                             "--json", str(live_json)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        metrics_port = wait_attached(live)
        replay(veth, pcap)
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        samples = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        hw = samples['dpukit_measure_packets_total{place="hw",algo="duet"}']
        dpu = samples['dpukit_measure_packets_total{place="dpu",algo="duet"}']
        drops = samples["dpukit_measure_drops_total"]
        assert hw + dpu + drops == PACKETS, body
        assert samples["dpukit_measure_hw_entries"] > 0 and samples["dpukit_measure_promotions_total"] > 0
        # Records in use (freed as flows age out), and what found none, for an alert.
        assert 0 < samples["dpukit_measure_duet_records_used"] <= samples["dpukit_measure_duet_records"], body
        assert samples["dpukit_measure_duet_records_full_total"] == 0, body
        top_flows = {name: v for name, v in samples.items() if name.startswith("dpukit_measure_top_flow_packets{")}
        assert 0 < len(top_flows) <= 10, body
        stop(live)
    finally:
        if live.poll() is None:
            live.kill()
        stop_nfcapd(nfcapd)

    res = json.loads(live_json.read_text())["figures"]
    # Beside the pcap, the kernel sends a few frames of its own on a new link (IPv6 neighbour discovery).
    assert res["frames"] - res["not_a_flow"] == PACKETS
    assert res["hw_packets"] + res["dpu_packets"] + res["drops"] == PACKETS
    # The XDP program's own CPU time (the kernel's BPF run-time statistics):
    # it ran once per frame (give or take a frame of the kernel's own that
    # arrives while the two are read).
    assert res["xdp_program"] is not None
    assert abs(res["xdp_program"]["runs"] - res["frames"]) <= 3 and res["xdp_program"]["cpu_ns"] > 0
    # The hardware share: the offline run's, within what was dropped and a
    # little timing (promotions land a few packets apart).
    assert abs(res["hw_share"] - offline["hw"]["share_of_packets"]) <= 0.03 + res["drops"] / PACKETS, \
        (res["hw_share"], offline["hw"]["share_of_packets"])
    # Every flow the pcap holds was seen; every heavy flow is reported with
    # its exact count, give or take the drops.
    assert res["flows"] == offline["flows"]
    live_heavy = {h["flow"]: h["estimate"] for h in res["heavy"]}
    true_heavy = {k: c for k, (c, _) in truth.items() if c >= TOP}
    assert true_heavy and set(true_heavy) <= set(live_heavy)
    for k, c in true_heavy.items():
        assert c - res["drops"] <= live_heavy[k] <= c + 0.01 * c + 2, (k, c, live_heavy[k])

    # The same heavy flows from the collector, as nfdump reads them.
    files = sorted(flows_dir.rglob("nfcapd.*"))
    assert files, "nfcapd wrote no file"
    # A record per heavy flow and interval, its packets since the last one:
    # over the run they add up to the flow's estimate.
    exported, records = nfdump_sums(flows_dir)
    assert res["ipfix_records"] == records and res["ipfix_errors"] == 0
    assert records > len(live_heavy), "several intervals were reported, not only the end"
    assert exported == {k: int(v + 0.5) for k, v in live_heavy.items()}


def test_live_duet_exports_from_its_records_alone(veth, tmp_path):
    """Without --all-flows a Duet live run keeps nothing per flow beyond its
    records. Flows age out of the hardware table during the run (a 100 ms idle
    timeout), their records retire and their counts are exported; the
    collector's sum for every heavy flow is its true count, less what it left
    in the sketch after its last record retired (fewer than TOP) and the drops."""
    exe = native_tool("dpukit-measure")
    pcap = make_pcap(exe, tmp_path, PACKETS)
    _, truth = offline_duet(exe, pcap, tmp_path)
    nfcapd, flows_dir, port = start_nfcapd(tmp_path)
    try:
        result, _ = live_over(exe, veth, pcap, tmp_path / "live.json", "--algo", "duet", "--heavy-threshold", str(TOP),
                              "--ipfix", f"127.0.0.1:{port}", "--export-interval", "0.3", "--hw-idle-timeout-ms", "100")
    finally:
        stop_nfcapd(nfcapd)

    res = result["figures"]
    duet = res["duet"]
    assert duet["records_retired"] > 0 and duet["records_full"] == 0, duet
    # Estimates only for the flows holding records at the end, not for every flow seen.
    assert res["flows"] <= duet["records"], (res["flows"], duet)
    exported, _ = nfdump_sums(flows_dir)
    true_heavy = {k: c for k, (c, _) in truth.items() if c >= TOP}
    assert true_heavy
    for k, c in true_heavy.items():
        assert c - TOP - res["drops"] <= exported.get(k, 0) <= c + 0.01 * c + 2, (k, c, exported.get(k))


def test_live_duet_says_when_its_records_run_out(veth, tmp_path):
    """With 2 records and flows that do not go idle, the third flow to reach
    TOP stays in the sketch, the tool says so once, and the result counts it."""
    exe = native_tool("dpukit-measure")
    pcap = make_pcap(exe, tmp_path, 10000)
    result, err = live_over(exe, veth, pcap, tmp_path / "live.json", "--algo", "duet", "--heavy-threshold", str(TOP),
                            "--duet-records", "2", "--export-interval", "0.1")
    duet = result["figures"]["duet"]
    assert duet["records"] == 2 and duet["records_used"] == 2 and duet["promotions"] == 2, duet
    assert duet["records_full"] > 0, duet
    assert err.count("promoted-flow records are used") == 1, err


def test_live_refuses_a_missing_interface(tmp_path):
    exe = native_tool("dpukit-measure")
    proc = subprocess.run([str(exe), "live", "--iface", "dk-no-such-if", "--duration", "1"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    if os.geteuid() == 0:
        assert "no such interface 'dk-no-such-if'" in proc.stderr, proc.stderr
    else:
        assert "root" in proc.stderr or "no such interface" in proc.stderr, proc.stderr
