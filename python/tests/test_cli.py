"""The command line: help, usage errors, forwarding, repository discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpukit
from dpukit import cli, paths


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "eval" in out and "core" in out


def test_help_from_a_child_process(run_dpukit):
    proc = run_dpukit("--help")
    assert proc.returncode == 0, proc.stderr
    assert "eval" in proc.stdout and "core" in proc.stdout


def test_only_existing_systems_are_registered(core_tool):
    # Every registered system's native tool is built by the same build that made dpukit-core.
    assert cli.SYSTEMS["core"].tool == "dpukit-core"
    for name, system in cli.SYSTEMS.items():
        assert (core_tool.parent / system.tool).is_file(), f"{name}: {system.tool} is not built"


def test_wrong_flag_exits_2_and_names_it(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["eval", "--no-such-flag"])
    assert exc.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


def test_wrong_flag_before_any_command_is_named(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--bogus"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_unknown_subcommand_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["frobnicate"])
    assert exc.value.code == 2
    assert "frobnicate" in capsys.readouterr().err


def test_no_subcommand_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 2


def test_unknown_experiment_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["eval", "--only", "core.nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "core.nope" in err and "core.channel" in err


def test_eval_list(capsys):
    assert cli.main(["eval", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("core.ring", "core.channel", "core.flowtable"):
        assert name in out


def test_forward_without_tool_says_how_to_build(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DPUKIT_BUILD", str(tmp_path))
    assert cli.main(["core", "--help"]) == 1
    err = capsys.readouterr().err
    assert "dpukit-core not found" in err and "make eval" in err


def test_eval_without_tool_fails_before_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DPUKIT_BUILD", str(tmp_path / "build"))
    out = tmp_path / "results"
    assert cli.main(["eval", "--quick", "--out", str(out)]) == 1
    assert "dpukit-core not found: run `make eval` or `make test` first" in capsys.readouterr().err
    assert not out.exists()


def test_default_root_is_the_repository(monkeypatch):
    monkeypatch.delenv("DPUKIT_ROOT", raising=False)
    monkeypatch.delenv("DPUKIT_BUILD", raising=False)
    root = paths.repo_root()
    assert (root / "python" / "dpukit" / "cli.py").is_file()
    assert Path(dpukit.__file__).resolve().is_relative_to(root)
    assert paths.tool_path("dpukit-core", must_exist=False) == root / "build" / "bin" / "dpukit-core"
    assert paths.results_dir() == root / "results"


def test_root_and_build_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DPUKIT_ROOT", str(tmp_path / "r"))
    monkeypatch.delenv("DPUKIT_BUILD", raising=False)
    assert paths.build_dir() == (tmp_path / "r" / "build").resolve()
    assert paths.results_dir() == (tmp_path / "r" / "results").resolve()
    monkeypatch.setenv("DPUKIT_BUILD", str(tmp_path / "b"))
    assert paths.bin_dir() == (tmp_path / "b" / "bin").resolve()
    assert paths.display_path(tmp_path / "r" / "build" / "x") == "build/x"


def test_forward_core_help(core_tool, run_dpukit):
    proc = run_dpukit("core", "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    for sub in ("ring-bench", "channel-bench", "flowtable-bench"):
        assert sub in text


def test_forward_passes_exit_status_through(core_tool, run_dpukit):
    # Contract: 2 on bad usage, and dpukit must not swallow it.
    proc = run_dpukit("core", "no-such-subcommand")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
