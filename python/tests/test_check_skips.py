"""scripts/check_skips.py, the rule that `make test` fails on a skip whose
reason the set-up could have removed, on reports written as GoogleTest and
pytest write them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "check_skips.py"

GTEST = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="2" failures="0" disabled="0" errors="0" name="AllTests">
  <testsuite name="Live" tests="2" failures="0" disabled="0" skipped="1" errors="0">
    <testcase name="Runs" status="run" result="completed" classname="Live" />
    <testcase name="NeedsRoot" status="run" result="skipped" classname="Live">
      <skipped message="live_test.cc:12&#x0A;live measurement needs root"><![CDATA[live_test.cc:12
live measurement needs root]]></skipped>
    </testcase>
  </testsuite>
</testsuites>
"""

PYTEST = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="1" tests="2">
<testcase classname="python.tests.test_x" name="test_ok" time="0.1" />
<testcase classname="python.tests.test_x" name="test_queues" time="0.0">
<skipped type="pytest.skip" message="not installed: ethtool">test_x.py:9: not installed: ethtool</skipped>
</testcase></testsuite></testsuites>
"""


def check(results: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(results)], capture_output=True, text=True, timeout=60)


def test_an_allowed_skip_passes_and_is_named(tmp_path: Path):
    (tmp_path / "gtest").mkdir()
    (tmp_path / "gtest" / "measure_tests.xml").write_text(GTEST)
    r = check(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped Live.NeedsRoot: live measurement needs root [allowed: not root" in r.stdout


def test_a_skip_for_a_missing_package_fails(tmp_path: Path):
    (tmp_path / "gtest").mkdir()
    (tmp_path / "gtest" / "measure_tests.xml").write_text(GTEST)
    (tmp_path / "pytest.xml").write_text(PYTEST)
    r = check(tmp_path)
    assert r.returncode == 1
    assert "python.tests.test_x.test_queues: not installed: ethtool [NOT ALLOWED]" in r.stdout
    assert "1 not allowed" in r.stdout
    assert "missing install step" in r.stderr


def test_no_reports_is_an_error_not_a_pass(tmp_path: Path):
    r = check(tmp_path)
    assert r.returncode == 2
    assert "no test reports" in r.stderr


def test_a_broken_report_is_named(tmp_path: Path):
    (tmp_path / "pytest.xml").write_text("<testsuites><testsuite>")
    r = check(tmp_path)
    assert r.returncode != 0
    assert "pytest.xml is not a test report" in r.stderr
