"""The Python layering, read from the sources' imports (ast, nothing imported):

- An experiment module is a module of the package ``dpukit.experiments``
  other than its ``__init__.py`` (the framework: Context, experiment, ...).
  No experiment module imports another; what they share lives below them,
  in ``dpukit/`` (``experiment_support``, ``measure_traces``, ...).
- Below the experiments, no module of ``dpukit/`` imports an experiment
  module; only the front door (``cli``, ``evaluate``, ``compare``) is above.
- A test module is a file pytest collects, ``tests/test_*.py``. No test
  module imports another; ``conftest.py`` and the support modules
  (``*_support.py``) hold what tests share.
"""

from __future__ import annotations

import ast
from pathlib import Path

PYTHON = Path(__file__).resolve().parent.parent
EXPERIMENTS = PYTHON / "dpukit" / "experiments"
TESTS = PYTHON / "tests"
ABOVE_EXPERIMENTS = {"cli", "evaluate", "compare", "__main__"}

# Imports that break the rule today, each with why it is still here. An entry
# that no longer occurs fails the test too, so that the list only shrinks.
KNOWN: dict[tuple[str, str], str] = {
    ("dpukit.experiments.bench_dpu", "dpukit.experiments.bench"):
        "bench_dpu reuses bench's runner (run_bench, list_operators); both files were being changed by another "
        "change when the rule came in (issue 34 §3)",
}


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module ``path`` imports, anywhere in it (inside functions too), as a dotted name;
    ``from P import X`` counts as P and P.X (X may be a module)."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the module's package
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def experiment_modules() -> dict[str, Path]:
    return {f"dpukit.experiments.{p.stem}": p for p in sorted(EXPERIMENTS.glob("*.py")) if p.name != "__init__.py"}


def violations() -> dict[tuple[str, str], str]:
    exps = experiment_modules()
    found: dict[tuple[str, str], str] = {}
    for name, path in exps.items():
        for imp in imported_modules(path, "dpukit.experiments"):
            if imp in exps and imp != name:
                found[(name, imp)] = "an experiment module imports another experiment module"
    for path in sorted((PYTHON / "dpukit").glob("*.py")):
        if path.stem in ABOVE_EXPERIMENTS:
            continue
        name = f"dpukit.{path.stem}" if path.name != "__init__.py" else "dpukit"
        for imp in imported_modules(path, "dpukit"):
            if imp in exps:
                found[(name, imp)] = "a module below the experiments imports an experiment module"
    tests = {p.stem for p in TESTS.glob("test_*.py")}
    for path in sorted(TESTS.glob("test_*.py")):
        for imp in imported_modules(path, ""):
            if imp.split(".")[0] in tests and imp.split(".")[0] != path.stem:
                found[(path.stem, imp.split(".")[0])] = "a test module imports another test module"
    return found


def test_no_experiment_or_test_module_imports_another():
    found = violations()
    new = [f"{a} imports {b}: {why}" for (a, b), why in sorted(found.items()) if (a, b) not in KNOWN]
    assert not new, ("move what they share below them (dpukit/experiment_support.py, or a tests/*_support.py):\n"
                     + "\n".join(new))
    gone = [f"{a} -> {b}" for a, b in KNOWN if (a, b) not in found]
    assert not gone, "no longer imported, remove from KNOWN: " + ", ".join(gone)


def test_the_scan_sees_each_kind_of_import(tmp_path: Path):
    """The forms an import can take, each found (so that the rule cannot be dodged by spelling)."""
    src = tmp_path / "m.py"
    src.write_text("import dpukit.experiments.mesh\n"
                   "from dpukit.experiments import kv\n"
                   "from dpukit.experiments.core import TOOL\n"
                   "from . import measure\n"
                   "from .bench import run_bench\n"
                   "def f():\n    from test_mesh_h2 import nghttp\n")
    got = imported_modules(src, "dpukit.experiments")
    assert {"dpukit.experiments.mesh", "dpukit.experiments.kv", "dpukit.experiments.core",
            "dpukit.experiments.measure", "dpukit.experiments.bench", "test_mesh_h2"} <= got
