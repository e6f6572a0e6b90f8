#!/usr/bin/env python3
"""Fails `make test` on a skipped test whose reason is not an allowed one.

A test that skips on a fresh machine for something the set-up could
install (a package, a built tool) hides a missing install step, so only the
reasons below may skip: what the set-up cannot give a machine. Each names
why. Reads GoogleTest's XML reports (GTEST_OUTPUT=xml:DIR/, one file per
test process under ctest) and pytest's JUnit XML from the directory given.

    scripts/check_skips.py build/test-results
"""
from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

# (pattern searched in the reason, why it may skip)
ALLOWED: list[tuple[str, str]] = [
    (r"needs root|live measurement needs root|the unprivileged user cannot",
     "not root: BPF programs, cgroups, mounts and other users need it, and the set-up does not make a user root"),
    (r"needs two CPUs",
     "a machine with one CPU cannot pin the host and dpu sides apart"),
    (r"no second NUMA node",
     "the machine has one NUMA node"),
    (r"no network namespaces here|cannot create a network namespace|cannot create a veth pair",
     "a container that refuses network namespaces or veth pairs (the kernel's or the runtime's rule)"),
    (r"cannot mount|no loop device|mkfs\.ext4 failed",
     "a container that refuses mounts or loop devices"),
    (r"perf_event_open refused|instructions not countable here",
     "a kernel or hypervisor that gives no performance counters (perf_event_paranoid, a VM without a PMU)"),
    (r"CFS bandwidth unavailable here|a cgroup2 mount",
     "no cpu controller mounted where the tests run"),
    (r"the kernel refused live measurement here",
     "a kernel without XDP or AF_XDP for veth"),
    (r"does not collapse into huge pages",
     "a kernel before 6.1 or without transparent huge pages"),
    (r"refuses O_DIRECT|no FIEMAP",
     "a temporary directory on a filesystem without O_DIRECT or FIEMAP (tmpfs, overlayfs)"),
    (r"this machine has hardware counters|memcpy has a dev backend here",
     "a test of the machine without: it runs only where the thing is absent"),
    (r"the bug did not trigger",
     "a regression test of a RocksDB bug that a fixed RocksDB no longer shows"),
]


@dataclass
class Skip:
    test: str
    reason: str


def skips_in(path: Path) -> list[Skip]:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise SystemExit(f"check_skips: {path.name} is not a test report: {e}")
    found = []
    for case in root.iter("testcase"):
        skipped = case.find("skipped")
        if skipped is None and case.get("result") != "skipped":
            continue
        reason = (skipped.get("message") if skipped is not None else "") or (skipped.text if skipped is not None else "") or ""
        name = ".".join(x for x in (case.get("classname"), case.get("name")) if x)
        # GoogleTest's message starts with "file:line\n": the reason is what follows.
        found.append(Skip(name, reason.split("\n", 1)[-1].strip() if "\n" in reason else reason.strip()))
    return found


def why_allowed(reason: str) -> str | None:
    for pattern, why in ALLOWED:
        if re.search(pattern, reason):
            return why
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    results = Path(argv[1])
    reports = sorted(results.rglob("*.xml"))
    if not reports:
        print(f"check_skips: no test reports under {results}", file=sys.stderr)
        return 2
    skips = [s for r in reports for s in skips_in(r)]
    refused = [s for s in skips if why_allowed(s.reason) is None]
    for s in skips:
        why = why_allowed(s.reason)
        print(f"skipped {s.test}: {s.reason or '(no reason given)'}" + (f" [allowed: {why}]" if why else " [NOT ALLOWED]"))
    print(f"check_skips: {len(reports)} reports, {len(skips)} skipped, {len(refused)} not allowed")
    if refused:
        print("A skip outside the allowed list (scripts/check_skips.py) hides a missing install step or a broken "
              "test: install what it needs in the set-up, or fix the test.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
