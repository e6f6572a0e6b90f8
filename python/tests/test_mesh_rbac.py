"""Authorization (envoy.filters.http.rbac) in dpukit-mesh, decided request by
request beside Envoy 1.40 on the same YAML: the policies Istio generates for
an AuthorizationPolicy (ALLOW by service account or namespace over mTLS, DENY
by path), a shadow policy, and the matchers an operator writes by hand
(addresses, ports, SNI, headers, the combinators). Every request's status
and 403 body, and the rbac counters, must be Envoy's."""

from __future__ import annotations

import re
import socket
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from mesh_support import Echoes, envoy_validate, start_proxy
from tls_support import *  # noqa: F401,F403
from tls_support import (BACKEND_DNS, TLS_KINDS, FilterChain, Pki, client_context, downstream_tls, hcm_filter,
                         listener, read_http, spiffe_id, tcp_proxy_filter, tls_bootstrap, tls_cluster, tls_connect)
from dpukit.procs import Group, free_port

FRONTEND, OTHER = spiffe_id("frontend"), spiffe_id("other")
RBAC_TYPE = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"



def rbac_filter(rules: str) -> str:
    """An RBAC filter list item around ``rules`` (its typed_config's fields, indented 4)."""
    return f"""\
- name: envoy.filters.http.rbac
  typed_config:
    "@type": {RBAC_TYPE}
""" + rules


# Istio puts its DENY filter before its ALLOW filter.
DENY = rbac_filter(f"""\
    rules:
      action: DENY
      policies:
        ns[default]-policy[deny-secrets]-rule[0]:
          permissions:
          - or_rules:
              rules:
              - url_path: {{path: {{prefix: /api/secret}}}}
              - header: {{name: x-debug, present_match: true}}
          principals:
          - not_id: {{authenticated: {{principal_name: {{exact: "{FRONTEND}"}}}}}}
""")

ALLOW = rbac_filter(f"""\
    rules:
      action: ALLOW
      policies:
        ns[default]-policy[frontend-reads]-rule[0]:
          permissions:
          - and_rules:
              rules:
              - or_rules:
                  rules:
                  - header: {{name: ":method", string_match: {{exact: GET}}}}
                  - header: {{name: ":method", string_match: {{exact: HEAD}}}}
              - or_rules:
                  rules:
                  - url_path: {{path: {{prefix: /api/}}}}
          principals:
          - and_ids:
              ids:
              - or_ids:
                  ids:
                  - authenticated: {{principal_name: {{exact: "{FRONTEND}"}}}}
        ns[default]-policy[namespace-writes]-rule[0]:
          permissions:
          - and_rules:
              rules:
              - header: {{name: ":method", string_match: {{exact: POST}}}}
              - url_path: {{path: {{safe_regex: {{regex: "/api/items/[0-9]+"}}}}}}
              - destination_port: PORT
          principals:
          - and_ids:
              ids:
              - authenticated: {{principal_name: {{safe_regex: {{regex: "spiffe://cluster[.]local/ns/default/sa/.*"}}}}}}
              - direct_remote_ip: {{address_prefix: 127.0.0.0, prefix_len: 8}}
              - header: {{name: x-tenant, string_match: {{prefix: team-, ignore_case: true}}}}
        hand-written-health:
          permissions:
          - and_rules:
              rules:
              - url_path: {{path: {{exact: /healthz}}}}
              - requested_server_name: {{suffix: .svc.cluster.local}}
              - destination_ip: {{address_prefix: 127.0.0.1}}
              - not_rule: {{destination_port_range: {{start: 1, end: 1024}}}}
          principals:
          - any: true
    shadow_rules:
      action: DENY
      policies:
        shadow-no-admin:
          permissions:
          - url_path: {{path: {{prefix: /api/admin}}}}
          principals:
          - remote_ip: {{address_prefix: 127.0.0.1, prefix_len: 32}}
""")

# (client, method, path, extra headers): the client's certificate is frontend's or other's.
REQUESTS = [
    ("frontend", "GET", "/api/items", ""),
    ("frontend", "HEAD", "/api/items", ""),
    ("frontend", "GET", "/api/items?q=1", ""),
    ("frontend", "DELETE", "/api/items", ""),
    ("frontend", "GET", "/web/index.html", ""),
    ("frontend", "GET", "/api/secret/key", ""),
    ("frontend", "GET", "/api/admin/users", ""),
    ("other", "GET", "/api/items", ""),
    ("other", "GET", "/api/secret/key", ""),
    ("other", "GET", "/api/items", "x-debug: 1\r\n"),
    ("other", "POST", "/api/items/42", "x-tenant: Team-Blue\r\n"),
    ("other", "POST", "/api/items/42", "x-tenant: blue\r\n"),
    ("other", "POST", "/api/items/abc", "x-tenant: team-blue\r\n"),
    ("other", "POST", "/api/items/42", ""),
    ("frontend", "POST", "/api/items/7", "x-tenant: team-red\r\n"),
    ("other", "GET", "/healthz", ""),
    ("other", "GET", "/healthz?verbose", ""),
    ("other", "GET", "/api/admin/users", ""),
]


def allow(policies: dict[str, tuple[str, str]]) -> str:
    """An RBAC filter of ALLOW policies: name -> (a permission, a principal), flow-style."""
    return rbac_filter("    rules:\n      action: ALLOW\n      policies:\n" + "".join(
        f"        {name}:\n          permissions: [{perm}]\n          principals: [{princ}]\n"
        for name, (perm, princ) in policies.items()))


@dataclass
class Node:
    kind: str
    port: int
    admin: int


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[dict[str, Node]]:
    work = tmp_path_factory.mktemp("rbac")
    with Group(work / "logs") as group:
        echoes = Echoes(group)
        echo = echoes.start("backend")
        made: dict[str, Node] = {}
        for kind in TLS_KINDS:
            port, admin = free_port(), free_port()
            filters = (DENY + ALLOW).replace("destination_port: PORT", f"destination_port: {port}")
            chain = FilterChain(hcm_filter("backend", http_filters=filters),
                                downstream_tls(6, cert=pki.mesh.backend, ca=pki.mesh.ca.cert))
            # A tls_inspector, as on Istio's inbound listeners: it is what tells Envoy the SNI.
            config = tls_bootstrap(admin=admin, listeners=[listener("rbac", port, [chain], inspector=True)],
                                   clusters=[tls_cluster("backend", echo)], node="node-b")
            if kind == "envoy":
                (work / "config.yaml").write_text(config)
                checked = envoy_validate(work / "config.yaml")
                assert checked.returncode == 0, checked.stderr[-2000:]
            start_proxy(group, kind, config, work / kind, port=port, admin=admin)
            made[kind] = Node(kind, port, admin)
        yield made


def ask(node: Node, pki: Pki, client: str, method: str, path: str, headers: str) -> tuple[int, bytes]:
    cert = {"frontend": pki.mesh.frontend, "other": pki.other}[client]
    with tls_connect(node.port, client_context(ca=pki.mesh.ca.cert, cert=cert), sni=BACKEND_DNS) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: {BACKEND_DNS}\r\n{headers}Connection: close\r\n\r\n".encode())
        if method == "HEAD":
            s.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
            return int(head.split()[1]), b""
        status, _, body = read_http(s)
        return status, body


def rbac_counters(admin: int) -> dict[str, int]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/stats", timeout=5).read().decode()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^http\.ingress_http\.rbac\.(\w+): (\d+)$", text, re.M)}


def test_every_decision_is_envoys(nodes: dict[str, Node], pki: Pki):
    before = {k: rbac_counters(n.admin) for k, n in nodes.items()}
    decisions = {kind: [ask(node, pki, *r) for r in REQUESTS] for kind, node in nodes.items()}
    reference = decisions["envoy"]
    statuses = [s for s, _ in reference]
    assert 403 in statuses and 200 in statuses, statuses  # the policies both admit and refuse
    for kind in ("mesh", "mesh-pipelined"):
        for r, want, got in zip(REQUESTS, reference, decisions[kind]):
            assert got == want, f"{kind} {r}: {got} (Envoy {want})"
    for status, body in reference:
        if status == 403:
            assert body == b"RBAC: access denied"
    after = {k: rbac_counters(n.admin) for k, n in nodes.items()}
    counted = {k: {c: after[k].get(c, 0) - before[k].get(c, 0) for c in after["envoy"]} for k in nodes}
    assert set(after["envoy"]) >= {"allowed", "denied", "shadow_allowed", "shadow_denied"}, after["envoy"]
    for kind in ("mesh", "mesh-pipelined"):
        assert counted[kind] == counted["envoy"], (kind, counted[kind], counted["envoy"])


def test_plaintext_has_no_authenticated_principal(tmp_path: Path, pki: Pki):
    """Without TLS, `authenticated` matches nobody, and an IP principal still
    does: a request is let through by the address policy only."""
    policy = allow({"by-identity": ("{url_path: {path: {prefix: /id/}}}", "{authenticated: {}}"),
                    "by-address": ("{url_path: {path: {prefix: /ip/}}}",
                                   "{direct_remote_ip: {address_prefix: 127.0.0.1}}")})
    with Group(tmp_path / "logs") as group:
        echo = Echoes(group).start("backend")
        results = {}
        for kind in TLS_KINDS:
            port, admin = free_port(), free_port()
            config = tls_bootstrap(admin=admin, listeners=[listener("plain", port, [FilterChain(
                hcm_filter("backend", http_filters=policy))])], clusters=[tls_cluster("backend", echo)])
            start_proxy(group, kind, config, tmp_path / kind, port=port, admin=admin)
            got = []
            for path in ("/id/x", "/ip/x", "/other"):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                    got.append(read_http(s)[0])
            results[kind] = got
        assert results["envoy"] == [403, 200, 403], results
        assert results["mesh"] == results["envoy"] and results["mesh-pipelined"] == results["envoy"], results


def test_unsupported_rbac_fields_are_refused_by_path(tmp_path: Path):
    from conftest import native_tool
    import subprocess
    mesh = native_tool("dpukit-mesh")
    bad = {
        "metadata": "{metadata: {filter: x, path: [{key: y}], value: {string_match: {exact: z}}}}",
        "uri_template": "{uri_template: {name: envoy.uri_template.uri_template_matcher}}",
    }
    for what, permission in bad.items():
        policy = allow({"p": (permission, "{any: true}")})
        config = tls_bootstrap(admin=free_port(), listeners=[listener("l", free_port(), [FilterChain(
            hcm_filter("backend", http_filters=policy))])], clusters=[tls_cluster("backend", 1)])
        path = tmp_path / f"{what}.yaml"
        path.write_text(config)
        proc = subprocess.run([str(mesh), "validate", "--config", str(path)], capture_output=True, text=True, timeout=30)
        assert proc.returncode != 0, (what, proc.stdout)
        assert "not supported by dpukit-mesh" in proc.stderr and "rules.policies.p" in proc.stderr, proc.stderr


def test_the_sni_is_known_only_with_a_tls_inspector(tmp_path: Path, pki: Pki):
    """Envoy's requested_server_name comes from the tls_inspector: on a TLS
    listener without one an SNI policy matches nothing, with one it matches
    the client's SNI. dpukit-mesh answers the same."""
    policy = allow({"by-sni": ("{requested_server_name: {suffix: .svc.cluster.local}}", "{any: true}")})
    with Group(tmp_path / "logs") as group:
        echo = Echoes(group).start("backend")
        results = {}
        for kind in TLS_KINDS:
            got = []
            for inspector in (False, True):
                port, admin = free_port(), free_port()
                chain = FilterChain(hcm_filter("backend", http_filters=policy),
                                    downstream_tls(6, cert=pki.mesh.backend, ca=pki.mesh.ca.cert))
                config = tls_bootstrap(admin=admin, listeners=[listener("l", port, [chain], inspector=inspector)],
                                       clusters=[tls_cluster("backend", echo)])
                start_proxy(group, kind, config, tmp_path / f"{kind}-{inspector}", port=port, admin=admin)
                got.append(ask(Node(kind, port, admin), pki, "other", "GET", "/", "")[0])
            results[kind] = got
        assert results["envoy"] == [403, 200], results
        assert results["mesh"] == results["envoy"] and results["mesh-pipelined"] == results["envoy"], results


NETWORK_RBAC = f"""\
      - name: envoy.filters.network.rbac
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC
          stat_prefix: tcp.
          rules:
            action: ALLOW
            policies:
              ns[default]-policy[tcp-frontend]-rule[0]:
                permissions: [{{destination_port: PORT}}]
                principals:
                - and_ids:
                    ids:
                    - authenticated: {{principal_name: {{exact: "{FRONTEND}"}}}}
                    - not_id: {{direct_remote_ip: {{address_prefix: 10.0.0.0, prefix_len: 8}}}}
          shadow_rules:
            action: DENY
            policies:
              shadow-everyone:
                permissions: [{{any: true}}]
                principals: [{{direct_remote_ip: {{address_prefix: 127.0.0.1}}}}]
"""


def test_network_rbac_on_tcp_proxy_decides_as_envoy(tmp_path: Path, pki: Pki):
    """envoy.filters.network.rbac before tcp_proxy, over mTLS: frontend's
    connection is relayed, another workload's is closed on its first byte
    without an answer, as Envoy does; and <stat_prefix>rbac.* counts the
    same. A header rule, which Envoy refuses in the network filter, is
    refused by dpukit-mesh too."""
    with Group(tmp_path / "logs") as group:
        echo = Echoes(group).start("backend")
        results, counters = {}, {}
        for kind in TLS_KINDS:
            port, admin = free_port(), free_port()
            filters = NETWORK_RBAC.replace("PORT", str(port)) + tcp_proxy_filter("backend")
            chain = FilterChain(filters, downstream_tls(6, cert=pki.mesh.backend, ca=pki.mesh.ca.cert))
            config = tls_bootstrap(admin=admin, listeners=[listener("tcp", port, [chain])],
                                   clusters=[tls_cluster("backend", echo)])
            if kind == "envoy":
                (tmp_path / "config.yaml").write_text(config)
                checked = envoy_validate(tmp_path / "config.yaml")
                assert checked.returncode == 0, checked.stderr[-2000:]
            start_proxy(group, kind, config, tmp_path / kind, port=port, admin=admin)
            got = []
            for client in ("frontend", "other", "frontend"):
                try:
                    got.append(ask(Node(kind, port, admin), pki, client, "GET", "/tcp", "")[0])
                except (ConnectionError, ssl.SSLError, OSError):
                    got.append("closed")
            results[kind] = got
            text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/stats", timeout=5).read().decode()
            counters[kind] = {m.group(1): int(m.group(2))
                              for m in re.finditer(r"^tcp\.rbac\.(\w+): (\d+)$", text, re.M)}
        assert results["envoy"] == [200, "closed", 200], results
        assert results["mesh"] == results["envoy"] and results["mesh-pipelined"] == results["envoy"], results
        assert counters["envoy"].get("allowed") == 2 and counters["envoy"].get("denied") == 1, counters
        assert counters["mesh"] == counters["envoy"] and counters["mesh-pipelined"] == counters["envoy"], counters


def test_network_rbac_refuses_request_rules(tmp_path: Path):
    from conftest import native_tool
    import subprocess
    bad = NETWORK_RBAC.replace("PORT", "80").replace("direct_remote_ip: {address_prefix: 10.0.0.0, prefix_len: 8}",
                                                     "header: {name: x-a, present_match: true}")
    config = tls_bootstrap(admin=free_port(), listeners=[listener("tcp", free_port(), [FilterChain(
        bad + tcp_proxy_filter("backend"))])], clusters=[tls_cluster("backend", 1)])
    path = tmp_path / "bad.yaml"
    path.write_text(config)
    assert envoy_validate(path).returncode != 0  # Envoy refuses it too
    proc = subprocess.run([str(native_tool("dpukit-mesh")), "validate", "--config", str(path)], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode != 0 and "not supported by the RBAC network filter" in proc.stderr, proc.stderr
