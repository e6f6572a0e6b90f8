"""Where things are: the repository root, the build directory, the native tools.

- The root is ``$DPUKIT_ROOT`` if set, else the repository that contains this
  package (``<root>/python/dpukit/``).
- Native tools live in ``<build>/bin`` where ``<build>`` is ``$DPUKIT_BUILD``
  if set (a relative value is taken from the current directory, like any
  path), else ``<root>/build``.
"""

from __future__ import annotations

import os
from pathlib import Path

from dpukit.errors import DpukitError

ROOT_ENV = "DPUKIT_ROOT"
BUILD_ENV = "DPUKIT_BUILD"


def repo_root() -> Path:
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    env = os.environ.get(BUILD_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return repo_root() / "build"


def bin_dir() -> Path:
    return build_dir() / "bin"


def results_dir() -> Path:
    """Default parent of ``dpukit eval`` output directories."""
    return repo_root() / "results"


def display_path(path: Path) -> str:
    """``path`` relative to the repository root when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(repo_root()))
    except ValueError:
        return str(path)


class ToolNotFound(DpukitError):
    def __init__(self, tool: str, path: Path):
        self.tool = tool
        self.path = path
        super().__init__(
            f"{display_path(path)} not found: run `make eval` or `make test` first"
            + (f" (or fix ${BUILD_ENV}={os.environ[BUILD_ENV]})" if os.environ.get(BUILD_ENV) else "")
        )


def tool_path(tool: str, *, must_exist: bool = True) -> Path:
    """The path of native tool ``tool`` (e.g. ``dpukit-core``).

    Raises :class:`ToolNotFound` when ``must_exist`` and it is not an
    executable file.
    """
    path = bin_dir() / tool
    if must_exist and not (path.is_file() and os.access(path, os.X_OK)):
        raise ToolNotFound(tool, path)
    return path
