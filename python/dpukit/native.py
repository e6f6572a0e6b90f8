"""Running the native tools and checking what they return.

Every native tool subcommand takes ``--json OUT`` and writes one result object
that must match ``result.schema.json``. :func:`run_tool` runs one, waits for
it, and returns the parsed, validated result; anything else is a
:class:`NativeToolFailed` or :class:`InvalidResult` naming the command line.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import signal
import subprocess
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import jsonschema

from dpukit.errors import DpukitError
from dpukit.paths import tool_path

SCHEMA_ID = "dpukit.result/1"
STDERR_TAIL_LINES = 20


class NativeToolFailed(DpukitError):
    """A native tool exited non-zero, was killed, timed out or wrote no result."""

    def __init__(self, command: Sequence[str], reason: str, stderr: str = "", returncode: int | None = None):
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr
        self.reason = reason
        msg = f"{_tool_label(command)} {reason}\n  command: {shlex.join(self.command)}"
        tail = stderr_tail(stderr)
        if tail:
            msg += f"\n  stderr (last lines):\n" + "\n".join("    " + line for line in tail)
        else:
            msg += "\n  stderr: (empty)"
        super().__init__(msg)


class InvalidResult(DpukitError):
    """A result object does not match ``result.schema.json``."""

    def __init__(self, problems: list[str], source: str = "result"):
        self.problems = problems
        shown = problems[:10]
        more = f"\n  ... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        super().__init__(
            f"{source} does not match result.schema.json:\n" + "\n".join("  " + p for p in shown) + more
        )


def _tool_label(command: Sequence[str]) -> str:
    """``dpukit-core ring-bench`` from a full command line."""
    if not command:
        return "native tool"
    name = os.path.basename(command[0])
    if len(command) > 1 and not command[1].startswith("-"):
        name += " " + command[1]
    return name


def stderr_tail(stderr: str, lines: int = STDERR_TAIL_LINES) -> list[str]:
    return [line for line in stderr.rstrip().splitlines()][-lines:] if stderr.strip() else []


@functools.cache
def load_schema() -> dict[str, Any]:
    text = resources.files("dpukit").joinpath("result.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_problems(result: Any) -> list[str]:
    """Every way ``result`` violates the schema, as readable lines (empty = valid)."""
    problems = []
    for err in sorted(_validator().iter_errors(result), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        problems.append(f"{where}: {err.message}")
    return problems


def validate_result(result: Any, source: str = "result") -> dict[str, Any]:
    """Return ``result`` if it matches the schema, else raise :class:`InvalidResult`."""
    problems = schema_problems(result)
    if problems:
        raise InvalidResult(problems, source)
    return result


def load_result(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate one result JSON file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InvalidResult([f"not JSON: {e}"], str(path)) from None
    return validate_result(data, str(path))


def _kill_group(proc: subprocess.Popen) -> None:
    """End the tool and anything it started (it runs in its own process group)."""
    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_tool(
    tool: str,
    args: Sequence[str],
    *,
    json_path: str | os.PathLike | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run ``<build>/bin/<tool> ARGS... --json OUT`` and return its validated result.

    ``json_path`` is where the tool writes its result (kept as written); by
    default a temporary file that is removed afterwards. Raises
    :class:`~dpukit.paths.ToolNotFound`, :class:`NativeToolFailed` or
    :class:`InvalidResult`.
    """
    exe = tool_path(tool)
    with tempfile.TemporaryDirectory(prefix="dpukit-") as tmp:
        out = Path(json_path) if json_path is not None else Path(tmp) / "result.json"
        out = out.resolve()
        out.unlink(missing_ok=True)
        command = [str(exe), *map(str, args), "--json", str(out)]
        # Own process group: on timeout or Ctrl-C we can end the tool together
        # with any process it forked (the dpu side of a cross-process run).
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            raise NativeToolFailed(command, f"timed out after {timeout:g} s", stderr) from None
        except BaseException:
            _kill_group(proc)
            raise
        rc = proc.returncode
        if rc != 0:
            if rc < 0:
                try:
                    why = f"was killed by {signal.Signals(-rc).name}"
                except ValueError:
                    why = f"was killed by signal {-rc}"
            else:
                why = f"failed (exit {rc})"
            raise NativeToolFailed(command, why, stderr, rc)
        if not out.is_file() or out.stat().st_size == 0:
            raise NativeToolFailed(command, f"exited 0 but wrote no result to {out}", stderr, rc)
        try:
            result = json.loads(out.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise NativeToolFailed(command, f"wrote a result that is not JSON ({e})", stderr, rc) from None
        problems = schema_problems(result)
        if problems:
            if json_path is not None:
                # Keep the evidence, but out of the way of *.json globs.
                out.replace(out.with_name(out.name + ".invalid"))
            raise InvalidResult(problems, f"result of `{shlex.join(command)}`")
        return result
