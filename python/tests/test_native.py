"""Result schema validation and running native tools."""

from __future__ import annotations

import json

import pytest

from dpukit import native
from dpukit.paths import ToolNotFound


def test_sample_result_is_valid(sample_result):
    assert native.validate_result(sample_result) is sample_result


def test_result_without_cpu_ns_is_rejected(sample_result):
    del sample_result["cpu_ns"]
    with pytest.raises(native.InvalidResult) as exc:
        native.validate_result(sample_result)
    assert "cpu_ns" in str(exc.value)


@pytest.mark.parametrize("change, where", [
    (lambda r: r["cpu_ns"].pop("hw"), "cpu_ns"),
    (lambda r: r["cpu_ns"].update(host=-1), "cpu_ns/host"),
    (lambda r: r["cpu_ns"].update(gpu=5), "cpu_ns"),
    (lambda r: r.update(schema="dpukit.result/0"), "schema"),
    (lambda r: r.update(started_utc="2026-11-21 08:15:00"), "started_utc"),
    (lambda r: r.update(command_line=[]), "command_line"),
    (lambda r: r["machine"].pop("cores"), "machine"),
    (lambda r: r["placement"].pop("hw_cpus"), "placement"),
    (lambda r: r.update(wall_ns=1.5), "wall_ns"),
])
def test_schema_violations_are_named(sample_result, change, where):
    change(sample_result)
    problems = native.schema_problems(sample_result)
    assert problems and any(p.startswith(where) for p in problems), problems


def test_load_result_rejects_non_json(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("{not json")
    with pytest.raises(native.InvalidResult, match="not JSON"):
        native.load_result(p)


def test_missing_tool_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DPUKIT_BUILD", str(tmp_path))
    with pytest.raises(ToolNotFound, match="dpukit-core not found: run `make eval` or `make test` first"):
        native.run_tool("dpukit-core", ["ring-bench"])


def test_real_run_is_valid(core_tool, tmp_path):
    out = tmp_path / "ring.json"
    result = native.run_tool("dpukit-core", ["ring-bench", "--messages", "20000", "--batch", "8"], json_path=out)
    assert result["tool"] == "dpukit-core ring-bench"
    assert result["figures"]["messages"] == 20000
    # The file is kept exactly as the tool wrote it, and it is valid on its own.
    assert json.loads(out.read_text()) == result
    assert native.load_result(out) == result
    # It records the command line that produced it.
    assert result["command_line"][1:] == ["ring-bench", "--messages", "20000", "--batch", "8", "--json", str(out)]
    # The same real result without cpu_ns is rejected.
    del result["cpu_ns"]
    with pytest.raises(native.InvalidResult, match="cpu_ns"):
        native.validate_result(result)


def test_failing_tool_reports_command_and_stderr(core_tool):
    with pytest.raises(native.NativeToolFailed) as exc:
        native.run_tool("dpukit-core", ["ring-bench", "--no-such-option", "1"])
    err = exc.value
    assert err.returncode not in (0, None)
    text = str(err)
    assert "dpukit-core ring-bench failed (exit" in text
    assert "--no-such-option" in text  # the command line
    assert err.stderr.strip(), "the tool should explain a usage error on stderr"
    assert native.stderr_tail(err.stderr)[-1] in text
