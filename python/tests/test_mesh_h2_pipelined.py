"""HTTP/2 streams in the pipelined model: the filter and router modules and
the deparser run on the pipeline's stage threads for them too, as for
HTTP/1.1 requests. The routing table of test_mesh_vs_envoy, sent as HTTP/2
requests, gets the same status and upstream in both execution models and
from Envoy; the match stage's thread wakes for each stream (it sleeps on its
ring's doorbell while idle, so each wake-up is a voluntary context switch)."""

from __future__ import annotations

from pathlib import Path

from h2_support import nghttp
from mesh_support import *  # noqa: F401,F403
from mesh_support import Echoes, Proxy, bootstrap, cluster, ports, start_proxy
from routes_support import CLUSTERS, REQUESTS, VIRTUAL_HOSTS


def start(kind: str, echoes: Echoes, tmp_path: Path) -> Proxy:
    port, admin = ports(2)
    clusters = "".join(cluster(name, [echoes.ports[name]]) for name in CLUSTERS)
    config = bootstrap(port=port, admin=admin, virtual_hosts=VIRTUAL_HOSTS, clusters=clusters,
                       hcm_extra="          codec_type: AUTO\n")
    return start_proxy(echoes.group, kind, config, tmp_path / kind, port=port, admin=admin)


def run_table(proxy: Proxy) -> list[tuple[int, str | None]]:
    out = []
    for method, host, path, headers in REQUESTS:
        # (nghttp sends no empty field value: "1" matches the table's present_match as "" does)
        extra = [f"-H:method: {method}", f"-H:authority: {host}"] + [f"-H{k}: {v or 1}" for k, v in headers.items()]
        r = nghttp(proxy.url(path), *extra, timeout=30)
        out.append((r.status, r.headers.get("x-served-by")))
    return out


def stage_wakeups(pid: int, name: str) -> int:
    """Voluntary context switches of the proxy's thread `name` (a stage thread sleeps on its ring's doorbell)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() == name:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])
    raise AssertionError(f"no thread {name} in process {pid}")


def test_the_routing_table_over_http2_in_both_models(echoes: Echoes, tmp_path: Path) -> None:
    for name in CLUSTERS:
        echoes.start(name)
    results = {}
    for kind in ("envoy", "mesh", "mesh-pipelined"):
        proxy = start(kind, echoes, tmp_path)
        if kind == "mesh-pipelined":
            before = {t: stage_wakeups(proxy.proc.pid, t) for t in ("mesh:match", "mesh:deparse")}
        results[kind] = run_table(proxy)
        if kind == "mesh-pipelined":
            woke = {t: stage_wakeups(proxy.proc.pid, t) - n for t, n in before.items()}
            # One stream at a time, so each found the stages asleep.
            assert all(n >= len(REQUESTS) for n in woke.values()), woke
    assert {s for s, _ in results["envoy"]} >= {200, 404, 410}
    assert {u for _, u in results["envoy"] if u} == set(CLUSTERS)
    for kind in ("mesh", "mesh-pipelined"):
        differ = [f"{m} {h} {p} {hd}: envoy {e}, {kind} {o}"
                  for (m, h, p, hd), e, o in zip(REQUESTS, results["envoy"], results[kind]) if e != o]
        assert not differ, "\n".join(differ)
