"""The ``dpukit`` command: ``dpukit eval`` and one subcommand per system.

A system subcommand forwards everything after its name to that system's
native tool in the build directory, e.g. ``dpukit core ARGS...`` runs
``<build>/bin/dpukit-core ARGS...`` (``--help`` included).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NamedTuple, Sequence

from dpukit import __version__
from dpukit.errors import DpukitError
from dpukit.paths import results_dir, tool_path


class System(NamedTuple):
    tool: str  # native tool in <build>/bin
    help: str  # one line for `dpukit --help`


# System subcommand -> native tool. One line per system; add a system here
# once its tool exists.
SYSTEMS: dict[str, System] = {
    "core": System("dpukit-core", "the DPU model: ring, channel, flow-table benchmarks (dpukit-core)"),
    "measure": System("dpukit-measure", "Duet, NitroSketch and baseline sketches: run, compare, gen (dpukit-measure)"),
    "kv": System("dpukit-kv", "PulseDB on RocksDB: db_bench on each mode, measured (dpukit-kv)"),
    "mesh": System("dpukit-mesh", "FlatProxy: the node proxy (Envoy-configured), validate, echo service (dpukit-mesh)"),
    "bench": System("dpukit-bench", "DPUBench: operators on ref/lib/dev/engine backends: list, check, run, compare (dpukit-bench)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpukit",
        description="dpukit: host-DPU co-designed offloads. Run the evaluation or a system's native tool.",
        epilog="`dpukit SYSTEM --help` shows a system tool's own options.",
    )
    parser.add_argument("--version", action="version", version=f"dpukit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    ev = sub.add_parser(
        "eval", help="run the experiments and write a report under results/",
        description="Run the registered experiments on the emulated DPU and write "
                    "<out>/<UTC timestamp>/report.md and report.html (with plots and every raw "
                    "run JSON under runs/), then point <out>/latest at it.")
    ev.add_argument("--quick", action="store_true", help="small sweep, one run per point (about 2 minutes)")
    ev.add_argument("--out", metavar="DIR", type=Path, default=None,
                    help="parent directory of the result directories (default: results/ at the repository root)")
    ev.add_argument("--only", metavar="NAME[,NAME]", default=None,
                    help="run only these experiments (a name such as core.channel, or a prefix such as core)")
    ev.add_argument("--list", action="store_true", help="list the experiments and exit")
    ev.add_argument("--dpu", metavar="SPEED", default=None,
                    help="how fast a dpu CPU is against a host core, for every tool the eval runs: host "
                         "(default), bluefield2, bluefield3, or a factor in (0, 1] (docs/core.md); sets "
                         "$DPUKIT_DPU_SPEED")
    ev.add_argument("--render", metavar="DIR", type=Path, default=None,
                    help="rebuild DIR's report.md, report.html and plots from its runs/, measuring nothing")
    ev.add_argument("--compare", metavar="DIR", type=Path, default=None,
                    help="with --render A: write A/compare-<B>/report.{md,html}, A's and B's sections side by side "
                         "(e.g. an eval at --dpu host beside one at --dpu bluefield3)")
    ev.set_defaults(subparser=ev)

    for name, system in SYSTEMS.items():
        sp = sub.add_parser(name, help=system.help, add_help=False,
                            description=f"Forwards all arguments to {system.tool}.")
        sp.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def forward(system: str, args: Sequence[str]) -> int:
    """Replace this process with the system's native tool."""
    exe = tool_path(SYSTEMS[system].tool)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(exe, [str(exe), *args])
    except OSError as e:
        raise DpukitError(f"cannot run {exe}: {e.strerror}") from None
    return 127  # not reached


def cmd_eval(parser: argparse.ArgumentParser, ns: argparse.Namespace, argv: Sequence[str]) -> int:
    from dpukit import experiments
    from dpukit.evaluate import run_eval

    if ns.list:
        for e in experiments.registry().values():
            print(f"{e.name:16} {e.description}")
        return 0
    if ns.compare is not None and ns.render is None:
        parser.error("--compare needs --render A (the report to compare with)")
    if ns.render is not None:
        given = [f for f, v in (("--quick", ns.quick), ("--only", ns.only), ("--dpu", ns.dpu), ("--out", ns.out)) if v]
        if given:
            parser.error(f"--render rebuilds a finished eval as it ran: {', '.join(given)} cannot be given with it")
        from dpukit.compare import compare_evals
        from dpukit.evaluate import render_eval
        outcome = render_eval(ns.render)
        print(outcome.report_md)
        if ns.compare is not None:
            print(compare_evals(ns.render, ns.compare)[0])
        return 0
    only = [s.strip() for s in ns.only.split(",") if s.strip()] if ns.only else None
    if ns.only is not None and not only:
        parser.error("--only: give at least one experiment name")
    try:
        chosen = experiments.select(only)
    except KeyError as e:
        known = ", ".join(experiments.registry())
        parser.error(f"--only: no experiment named {e.args[0]!r} (known: {known})")
    out = ns.out if ns.out is not None else results_dir()
    from dpukit.dpu_speed import resolve_dpu_speed
    try:
        dpu = resolve_dpu_speed(ns.dpu)
    except ValueError as e:
        parser.error(f"--dpu: {e}")
    outcome = run_eval(chosen, quick=ns.quick, out_parent=out, argv=argv, dpu=dpu)
    if outcome.error is not None:
        print(f"dpukit: error: {outcome.failed} failed: {outcome.error}", file=sys.stderr)
        print(f"dpukit: partial report: {outcome.report_md}", file=sys.stderr)
        return 1
    print(outcome.report_md)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # System subcommands pass everything through, so they bypass argparse.
        if argv[:2] == ["bench", "compare"] and "--plot" in argv:
            from dpukit.experiments.bench import compare_command
            return compare_command(argv[1:])
        if argv and argv[0] in SYSTEMS:
            return forward(argv[0], argv[1:])
        parser = build_parser()
        # An option before any command ("dpukit --bogus") is named as such,
        # not reported as a missing command.
        if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
            parser.error(f"unrecognized arguments: {argv[0]}")
        ns = parser.parse_args(argv)
        if ns.command == "eval":
            return cmd_eval(ns.subparser, ns, argv)
        parser.error(f"unknown command {ns.command!r}")
    except DpukitError as e:
        print(f"dpukit: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dpukit: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
