"""Experiments on the DPU model itself (``dpukit-core``): ring, channel, flow table.

Each experiment is a ``collect`` step, which runs the tool through
``ctx.run_point`` / ``ctx.run_native`` (every run kept under ``runs/``), and a
pure ``render`` step, which turns the points into the section, its tables and
plots; ``dpukit eval --render`` runs the same steps with the runs read back.
"""

from __future__ import annotations

from typing import Any

from dpukit.experiment_support import mode_repeats_note, parameters_note, placement_note
from dpukit.experiments import Context, Point, experiment
from dpukit.plots import Series, line_plot
from dpukit.report import Section
from dpukit.units import fmt_bytes, fmt_bytes_short, fmt_int, fmt_sig, fmt_thousands, per

TOOL = "dpukit-core"
MiB = 1 << 20
GiB = 1 << 30


# -- core.ring ---------------------------------------------------------------


@experiment(
    "core.ring",
    title="core.ring: SPSC ring throughput vs batch size",
    description="In-process single-producer/single-consumer ring: messages per second as the batch grows.",
    tools=[TOOL],
)
def ring(ctx: Context) -> Section:
    batches = [1, 8, 32] if ctx.quick else [1, 4, 8, 32, 128]
    messages = 2_000_000 if ctx.quick else 20_000_000
    return render_ring(ctx, messages, batches, collect_ring(ctx, messages, batches))


def collect_ring(ctx: Context, messages: int, batches: list[int]) -> list[tuple[int, Point]]:
    """(batch, point) per batch size."""
    points: list[tuple[int, Point]] = []
    for i, batch in enumerate(batches, 1):
        p = ctx.run_point(
            TOOL, ["ring-bench", "--messages", messages, "--batch", batch],
            label=f"batch{batch}", key="messages_per_sec",
            detail=f"batch={batch} messages={fmt_int(messages)}", step=i, steps=len(batches))
        points.append((batch, p))
    return points


def render_ring(ctx: Context, messages: int, batches: list[int], points: list[tuple[int, Point]]) -> Section:
    sec = Section("core.ring: SPSC ring throughput vs batch size")
    sec.paragraph(
        f"`{TOOL} ring-bench` moves {fmt_int(messages)} small messages through one SPSC ring inside one "
        "process: a host thread pushes them `batch` at a time and a dpu thread pops them `batch` at a time. "
        "Both sides poll, so their CPU time per message is close to the wall time per message. "
        + mode_repeats_note(ctx, "messages_per_sec"))
    sec.paragraph(placement_note(ctx.runs))
    rows = []
    for batch, p in points:
        f, cpu = p.figures, p.cpu_ns
        rows.append([
            batch, fmt_int(f["messages"]), fmt_sig(f["seconds"]),
            fmt_sig(f["messages_per_sec"] / 1e6), fmt_sig(f["ns_per_message"]),
            fmt_sig(per(cpu["host"], f["messages"])), fmt_sig(per(cpu["dpu"], f["messages"])),
        ])
    sec.table(["batch", "messages", "seconds", "M msg/s", "ns/msg",
               "host CPU ns/msg", "dpu CPU ns/msg"], rows, caption="Ring throughput")
    path, rel = ctx.plot_path("throughput")
    line_plot(
        path, [Series("ring", [b for b, _ in points], [p.figures["messages_per_sec"] / 1e6 for _, p in points])],
        title="SPSC ring throughput", xlabel="batch size (messages)", ylabel="million messages / s",
        logx=True, xticks=batches, ymin_zero=True)
    sec.image(rel, "Ring messages per second vs batch size", "Messages per second vs batch size (log x).")
    return sec


# -- core.channel ------------------------------------------------------------


def channel_messages(payload: int, quick: bool) -> int:
    """Messages per point: 256 MiB (quick) or 1 GiB (full) of payload, bounded."""
    if quick:
        return max(2000, min(2_000_000, (256 * MiB) // payload))
    return max(2000, min(10_000_000, GiB // payload))


@experiment(
    "core.channel",
    title="core.channel: host-dpu channel throughput vs payload size",
    description="Channel throughput for payloads from 64 B to 64 KiB, in-process and cross-process.",
    tools=[TOOL],
)
def channel(ctx: Context) -> Section:
    payloads = [64, 1024, 16384, 65536] if ctx.quick else [64, 256, 1024, 4096, 16384, 65536]
    modes = ["thread", "process"]
    points, verified = collect_channel(ctx, modes, payloads)
    return render_channel(ctx, modes, payloads, points, verified)


def collect_channel(ctx: Context, modes: list[str], payloads: list[int]
                    ) -> tuple[dict[str, list[tuple[int, Point]]], dict[str, dict[str, Any]]]:
    """Per mode, (payload, point) per payload size; and per mode the run with ``--verify``."""
    verify_payload, verify_messages = 1500, 20_000
    steps = len(modes) * len(payloads) + len(modes)
    step = 0
    points: dict[str, list[tuple[int, Point]]] = {m: [] for m in modes}
    for mode in modes:
        for payload in payloads:
            step += 1
            n = channel_messages(payload, ctx.quick)
            p = ctx.run_point(
                TOOL, ["channel-bench", "--mode", mode, "--messages", n, "--payload", payload],
                label=f"{mode}-payload{payload}", key="gbytes_per_sec",
                detail=f"payload={payload} mode={mode} messages={fmt_int(n)}", step=step, steps=steps)
            points[mode].append((payload, p))
    verified: dict[str, dict[str, Any]] = {}
    for mode in modes:
        step += 1
        ctx.progress(f"verify payload={verify_payload} mode={mode}", step, steps)
        verified[mode] = ctx.run_native(
            TOOL, ["channel-bench", "--mode", mode, "--messages", verify_messages,
                   "--payload", verify_payload, "--verify"],
            label=f"{mode}-verify")
    return points, verified


def render_channel(ctx: Context, modes: list[str], payloads: list[int], points: dict[str, list[tuple[int, Point]]],
                   verified: dict[str, dict[str, Any]]) -> Section:
    sec = Section("core.channel: host-dpu channel throughput vs payload size")
    sec.paragraph(
        f"`{TOOL} channel-bench` sends messages from the host side to the dpu side over the channel "
        "(shared-memory SPSC rings with eventfd doorbells; the dpu side copies each payload out of the "
        "host-visible region). `--mode thread` runs both sides as threads of one process, "
        "`--mode process` as two processes. Each point moves "
        + ("256 MiB of payload (at least 2,000 and at most 2,000,000 messages). " if ctx.quick
           else "1 GiB of payload (at least 2,000 and at most 10,000,000 messages). ")
        + mode_repeats_note(ctx, "gbytes_per_sec"))
    sec.paragraph(placement_note(ctx.runs))
    rows = []
    for mode in modes:
        for payload, p in points[mode]:
            f, cpu = p.figures, p.cpu_ns
            rows.append([
                mode, fmt_bytes(payload), fmt_int(f["messages"]), fmt_sig(f["seconds"]),
                fmt_sig(f["gbytes_per_sec"]), fmt_sig(f["messages_per_sec"] / 1e6),
                fmt_sig(per(cpu["host"], f["messages"])), fmt_sig(per(cpu["dpu"], f["messages"])),
            ])
    sec.table(["mode", "payload", "messages", "seconds", "GB/s", "M msg/s",
               "host CPU ns/msg", "dpu CPU ns/msg"], rows,
              caption="Channel throughput and CPU time per message on each side")

    path, rel = ctx.plot_path("gbytes")
    line_plot(
        path, [Series(m, [x for x, _ in points[m]], [p.figures["gbytes_per_sec"] for _, p in points[m]])
               for m in modes],
        title="Channel throughput (bytes)", xlabel="payload size (bytes)", ylabel="GB/s",
        logx=True, xticks=payloads, xtick_format=fmt_bytes_short, ymin_zero=True)
    sec.image(rel, "Channel GB/s vs payload size", "Payload bytes per second vs payload size (log x), per mode.")
    path, rel = ctx.plot_path("messages")
    line_plot(
        path, [Series(m, [x for x, _ in points[m]], [p.figures["messages_per_sec"] / 1e6 for _, p in points[m]])
               for m in modes],
        title="Channel throughput (messages)", xlabel="payload size (bytes)", ylabel="million messages / s",
        logx=True, logy=True, xticks=payloads, xtick_format=fmt_bytes_short, y_format=lambda v: f"{v:g}")
    sec.image(rel, "Channel messages/s vs payload size", "Messages per second vs payload size (log-log), per mode.")

    checks = []
    for mode in modes:
        f = verified[mode]["figures"]
        ok = f.get("verified") is True
        checks.append(f"`{mode}`: {'payloads verified' if ok else 'VERIFICATION FAILED'} "
                      f"({fmt_int(f['messages'])} messages of {fmt_bytes(f['payload_bytes'])}, "
                      f"{fmt_sig(f['gbytes_per_sec'])} GB/s with checking)")
    sec.paragraph("Integrity check, separate runs with `--verify` (the dpu side checks every payload byte "
                  "and answers with a checksum that the host checks): " + "; ".join(checks) + ".")
    return sec


# -- core.flowtable ----------------------------------------------------------


def flowtable_capacity(inserts: int) -> int:
    """A power of two with room for twice the inserts (the table never fills)."""
    return max(1024, 1 << (2 * inserts - 1).bit_length())


@experiment(
    "core.flowtable",
    title="core.flowtable: hardware flow-table insertion rate",
    description="Rules inserted per second into the emulated hardware flow table vs the configured limit.",
    tools=[TOOL],
)
def flowtable(ctx: Context) -> Section:
    if ctx.quick:
        rates, fraction = [20000, 77000, 150000], 0.25
    else:
        rates, fraction = [10000, 25000, 50000, 77000, 110000, 200000], 0.5
    return render_flowtable(ctx, fraction, collect_flowtable(ctx, rates, fraction))


def collect_flowtable(ctx: Context, rates: list[int], fraction: float) -> list[tuple[int, Point]]:
    """(configured rate, point) per rate: ``fraction`` seconds' worth of insertions at that rate."""
    lookups = 1_000_000
    points: list[tuple[int, Point]] = []
    for i, rate in enumerate(rates, 1):
        inserts = int(rate * fraction)
        capacity = flowtable_capacity(inserts)
        p = ctx.run_point(
            TOOL, ["flowtable-bench", "--rate", rate, "--inserts", inserts,
                   "--capacity", capacity, "--lookups", lookups],
            label=f"rate{rate}", key="measured_rate",
            detail=f"rate={rate} inserts={fmt_int(inserts)}", step=i, steps=len(rates))
        points.append((rate, p))
    return points


def render_flowtable(ctx: Context, fraction: float, points: list[tuple[int, Point]]) -> Section:
    sec = Section("core.flowtable: hardware flow-table insertion rate")
    sec.paragraph(
        f"`{TOOL} flowtable-bench` requests {fraction:g} s worth of rule insertions at the configured rate "
        "from the dpu control path in one burst (table capacity at least twice the inserts); the thread that "
        "stands for the NIC applies them no faster than the configured rate. The measured rate is the steady "
        "rate between the first and the last applied rule. Because the whole burst is queued at once, its "
        "insertion latency (request to applied) is dominated by waiting behind the rate limit, so it grows "
        "with the burst length. The unloaded latency comes from a second phase of 200 rules offered at a "
        "tenth of the rate: the configured per-rule latency (`latency_us`) plus the NIC thread's wake-up, "
        "on a CPU it shares with the dpu control thread on this 2-core machine. Lookups are timed "
        "afterwards on the filled table (half hits, half misses). `hw` CPU time covers the NIC thread and "
        "the lookups. " + mode_repeats_note(ctx, "measured_rate"))
    sec.paragraph(placement_note(ctx.runs))
    note = parameters_note(points[0][1].median) if points else ""
    if note:
        sec.paragraph(note)
    rows = []
    for rate, p in points:
        f, cpu = p.figures, p.cpu_ns
        rows.append([
            fmt_int(rate), fmt_int(f["inserts_requested"]), fmt_int(f["inserted"]), fmt_int(f["refused"]),
            fmt_int(f["measured_rate"]), fmt_sig(100.0 * per(f["measured_rate"], rate)) + " %",
            fmt_sig(f["latency_us_p50"] / 1e3), fmt_sig(f["latency_us_p99"] / 1e3),
            fmt_sig(f["latency_us_max"] / 1e3),
            fmt_sig(f["unloaded_latency_us_p50"]), fmt_sig(f["unloaded_latency_us_p99"]),
            fmt_sig(f["lookups_per_sec"] / 1e6), fmt_sig(cpu["hw"] / 1e6),
        ])
    sec.table(["configured rate/s", "requested", "inserted", "refused", "measured rate/s", "of configured",
               "burst latency p50 ms", "p99 ms", "max ms", "unloaded p50 µs", "p99 µs", "M lookups/s",
               "hw CPU ms"], rows,
              caption="Insertion rate, insertion latency and lookups")
    path, rel = ctx.plot_path("rate")
    line_plot(
        path, [Series("measured", [r for r, _ in points], [p.figures["measured_rate"] for _, p in points])],
        title="Flow-table insertion rate", xlabel="configured rate (inserts / s)",
        ylabel="measured rate (inserts / s)", identity=True, ymin_zero=True,
        x_format=fmt_thousands, y_format=fmt_thousands)
    sec.image(rel, "Measured vs configured flow-table insertion rate",
              "Measured insertion rate vs configured rate; the dashed line is y = x.")
    return sec
