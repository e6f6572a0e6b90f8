"""dpukit-mesh against real Envoy, request by request: one table of requests
sent through both with the same bootstrap (only the ports differ); the
chosen upstream (x-served-by) and the status must be the same."""

from __future__ import annotations

from pathlib import Path


from mesh_support import *  # noqa: F401,F403
from mesh_support import Echoes, bootstrap, cluster, ports, request, start_proxy
from routes_support import CLUSTERS, REQUESTS, VIRTUAL_HOSTS


def run_table(kind: str, echoes: Echoes, tmp_path: Path) -> list[tuple[int, str | None]]:
    port, admin = ports(2)
    clusters = "".join(cluster(name, [echoes.ports[name]]) for name in CLUSTERS)
    config = bootstrap(port=port, admin=admin, virtual_hosts=VIRTUAL_HOSTS, clusters=clusters)
    start_proxy(echoes.group, kind, config, tmp_path / kind, port=port, admin=admin)
    out = []
    for method, host, path, headers in REQUESTS:
        r = request(port, method, path, host=host, headers=headers)
        out.append((r.status, r.header("x-served-by")))
    return out


def test_same_upstream_and_status_as_envoy(echoes: Echoes, tmp_path: Path):
    from mesh_support import envoy_bin
    envoy_bin()  # fails, with the how-to, when Envoy is not installed
    for name in CLUSTERS:
        echoes.start(name)
    reference = run_table("envoy", echoes, tmp_path)
    # The table must exercise every outcome: each cluster, direct responses, 404s.
    assert {s for s, _ in reference} >= {200, 404, 410}
    assert {u for _, u in reference if u} == set(CLUSTERS)
    ours = run_table("mesh", echoes, tmp_path)
    differ = [f"{m} {h} {p} {hd}: envoy {e}, dpukit-mesh {o}"
              for (m, h, p, hd), e, o in zip(REQUESTS, reference, ours) if e != o]
    assert not differ, "\n".join(differ)


def test_table_against_envoy_alone(echoes: Echoes, tmp_path: Path):
    """The reference itself, pinned: a change of Envoy's matching would show here first."""
    from mesh_support import envoy_bin
    envoy_bin()
    for name in CLUSTERS:
        echoes.start(name)
    got = dict(zip([(m, h, p, tuple(hd.items())) for m, h, p, hd in REQUESTS], run_table("envoy", echoes, tmp_path)))
    assert got[("GET", "api.example.com", "/v1/users", (("x-version", "2"),))] == (200, "api_v2")
    assert got[("GET", "api.example.com:9090", "/v1/users", ())] == (404, None)
    assert got[("GET", "a.b.example.com", "/", ())] == (200, "wild")
    assert got[("GET", "x.deep.example.com", "/", ())] == (200, "wild_deep")
    assert got[("GET", "www.example.com", "/STATIC/app.js", ())] == (200, "static")
    assert got[("GET", "other.org", "/", ())] == (404, None)
