"""Secrets pushed by SDS, beside Envoy 1.40 on the same configuration:
go-control-plane's snapshot cache (dpukit-xds-server) serves the secrets
over gRPC on a Unix socket, as istio-agent serves its proxy (an
``sds-grpc`` cluster, ``api_config_source`` GRPC), and over the ADS stream
(``sds_config: {ads: {}}``) to a listener that itself came over LDS.

Istio's shape throughout: an mTLS listener whose certificate is the secret
``default`` and whose trusted CA is ``ROOTCA`` (combined with the SAN of the
allowed peer). Each proxy, Envoy and dpukit-mesh in both models, must:
serve with the pushed certificate; take a pushed rotation for new
handshakes while a connection opened before keeps its certificate; NACK a
secret whose key does not match its certificate and keep the one in use.
Before its secrets come, a listener closes connections and counts them as
Envoy does (downstream_context_secrets_not_ready). And the certificate files
an SDS file names are watched too (dpukit-mesh only: Envoy watches the SDS
file alone unless told a watched_directory)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dpukit.experiments.mesh_xds import Snapshot, XdsServer, start_xds_proxy
from dpukit.procs import Group, free_port
from mesh_support import Echoes, Proxy, start_proxy
from tls_support import *  # noqa: F401,F403  (the pki fixture)
from tls_support import (BACKEND_DNS, TLS_KINDS, Pem, Pki, client_context, counter, sds_certificate_file,
                         spiffe_id, tls_connect, tls_exchange, tls_get, tls_refusal, wait_for)

FRONTEND, BACKEND = spiffe_id("frontend"), spiffe_id("backend")
TLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3"
HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
H2 = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
# The xDS tests' names for the proxies: dpukit-mesh in its two models.
XDS_KIND = {"envoy": "envoy", "mesh": "dpukit", "mesh-pipelined": "dpukit-pipelined"}


@pytest.fixture(params=TLS_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


# -- the configuration ---------------------------------------------------------------------


def grpc_source() -> dict[str, Any]:
    """istio-agent's SDS: gRPC to the sds-grpc cluster (its Unix socket)."""
    return {"api_config_source": {"api_type": "GRPC", "transport_api_version": "V3",
                                  "set_node_on_first_message_only": True,
                                  "grpc_services": [{"envoy_grpc": {"cluster_name": "sds-grpc"}}]},
            "resource_api_version": "V3", "initial_fetch_timeout": "2s"}


def ads_source() -> dict[str, Any]:
    return {"ads": {}, "resource_api_version": "V3"}


def inbound_listener(port: int, source: dict[str, Any]) -> dict[str, Any]:
    """An mTLS listener as Istio writes one: certificate ``default``,
    trusted CA ``ROOTCA`` with the frontend's SAN, both from ``source``."""
    hcm = {"name": "envoy.filters.network.http_connection_manager",
           "typed_config": {"@type": HCM, "stat_prefix": "inbound",
                            "route_config": {"name": "local", "virtual_hosts": [
                                {"name": "all", "domains": ["*"],
                                 "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "backend"}}]}]},
                            "http_filters": [{"name": "envoy.filters.http.router",
                                              "typed_config": {"@type": ROUTER}}]}}
    tls = {"@type": f"{TLS}.DownstreamTlsContext", "require_client_certificate": True,
           "common_tls_context": {
               "tls_certificate_sds_secret_configs": [{"name": "default", "sds_config": source}],
               "combined_validation_context": {
                   "default_validation_context": {"match_typed_subject_alt_names": [
                       {"san_type": "URI", "matcher": {"exact": FRONTEND}}]},
                   "validation_context_sds_secret_config": {"name": "ROOTCA", "sds_config": source}}}}
    return {"name": "inbound", "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [hcm],
                               "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": tls}}]}


def static_cluster(name: str, address: dict[str, Any], *, http2: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "type": "STATIC", "connect_timeout": "1s",
                         "load_assignment": {"cluster_name": name, "endpoints": [
                             {"lb_endpoints": [{"endpoint": {"address": address}}]}]}}
    if http2:
        c["typed_extension_protocol_options"] = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": H2, "explicit_http_config": {"http2_protocol_options": {}}}}
    return c


def tcp_address(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def istio_agent_bootstrap(node: str, *, admin: int, port: int, echo: int, sock: Path) -> dict[str, Any]:
    """A static bootstrap whose listener takes its secrets from the sds-grpc cluster on ``sock``."""
    return {"node": {"id": node, "cluster": "dpukit"},
            "admin": {"address": tcp_address(admin)},
            "static_resources": {
                "listeners": [inbound_listener(port, grpc_source())],
                "clusters": [static_cluster("backend", tcp_address(echo)),
                             static_cluster("sds-grpc", {"pipe": {"path": str(sock)}}, http2=True)]}}


def istio_agent_proxy(group: Group, kind: str, node: str, pki: Pki, tmp_path: Path,
                      sock: Path) -> tuple[XdsServer, Snapshot, Proxy]:
    """istio-agent's way, serving: the SDS server on ``sock`` with snapshot
    "1" (the backend's certificate and the root), and the proxy on
    istio_agent_bootstrap, once it acked those secrets; the server, the
    snapshot and the proxy."""
    port, admin = free_port(), free_port()
    echo = Echoes(group).start("backend")
    xds = XdsServer.start(group, sds_unix=sock)
    first = Snapshot("1", secrets=[certificate_secret(pki.mesh.backend), root_secret(pki)])
    xds.post(node, first)
    bootstrap = istio_agent_bootstrap(node, admin=admin, port=port, echo=echo, sock=sock)
    proxy = start_proxy(group, kind, json.dumps(bootstrap, indent=1), tmp_path, port=port, admin=admin)
    xds.wait_acked(node, first, types=["secrets"])
    return xds, first, proxy


def certificate_secret(pem: Pem, *, key: Pem | None = None) -> dict[str, Any]:
    """Secret ``default``: ``pem``'s certificate, with ``key``'s key when given (a mismatch)."""
    return {"name": "default", "tls_certificate": {
        "certificate_chain": {"inline_string": pem.cert.read_text()},
        "private_key": {"inline_string": (key or pem).key.read_text()}}}


def root_secret(pki: Pki) -> dict[str, Any]:
    return {"name": "ROOTCA", "validation_context": {"trusted_ca": {"inline_string": pki.mesh.ca.cert.read_text()}}}


# -- what every pushed secret must do -------------------------------------------------------


def check_rotation_and_nack(xds: XdsServer, node: str, snapshot: Snapshot, port: int, pki: Pki) -> None:
    """Served with the pushed certificate; a pushed rotation reaches new
    handshakes and an open connection keeps its certificate; a secret whose
    key is not its certificate's is NACKed and the one in use stays."""
    ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend)
    kept = tls_connect(port, ctx)
    try:
        first = tls_exchange(kept)
        assert (first.status, first.peer_serial) == (200, pki.mesh.backend.serial)
        # An identity the peer does not accept is refused (the pushed CA and the default SAN are both in force).
        assert tls_refusal(port, client_context(ca=pki.mesh.ca.cert, cert=pki.other)) == "SSLV3_ALERT_CERTIFICATE_UNKNOWN"

        rotated = pki.factory.issue(f"backend-{node}", pki.mesh.ca, uris=[BACKEND], dns=[BACKEND_DNS])
        second = Snapshot("2", listeners=snapshot.listeners, clusters=snapshot.clusters,
                          secrets=[certificate_secret(rotated), root_secret(pki)])
        xds.post(node, second)
        xds.wait_acked(node, second, types=["secrets"])
        wait_for("a new handshake presents the pushed certificate", lambda: tls_get(port, ctx).peer_serial == rotated.serial)
        again = tls_exchange(kept)
        assert (again.status, again.peer_serial) == (200, pki.mesh.backend.serial)

        bad = Snapshot("3", listeners=snapshot.listeners, clusters=snapshot.clusters,
                       secrets=[certificate_secret(pki.mesh.backend, key=rotated), root_secret(pki)])
        xds.post(node, bad)
        nack = xds.wait_nacked(node, "3", "secrets")
        assert nack["message"], nack
        reply = tls_get(port, ctx)
        assert (reply.status, reply.peer_serial) == (200, rotated.serial)
        assert tls_exchange(kept).status == 200
    finally:
        kept.close()


def test_sds_over_grpc_from_a_unix_socket(kind: str, pki: Pki, tmp_path: Path):
    """istio-agent's way: a static bootstrap whose listener takes its secrets
    from the sds-grpc cluster, a Unix socket where go-control-plane's
    SecretDiscoveryService answers."""
    node = f"sds-grpc-{kind}"
    with Group(tmp_path / "logs") as group:
        xds, first, proxy = istio_agent_proxy(group, kind, node, pki, tmp_path, tmp_path / "sds.sock")
        check_rotation_and_nack(xds, node, first, proxy.port, pki)
        proxy.proc.check_alive()


def test_sds_over_ads_to_a_listener_from_lds(kind: str, pki: Pki, tmp_path: Path):
    """Secrets on the ADS stream (sds_config: {ads: {}}), named by a
    listener that came over LDS in the same snapshot."""
    node = f"sds-ads-{kind}"
    port = free_port()
    with Group(tmp_path / "logs") as group:
        echo = Echoes(group).start("backend")
        xds = XdsServer.start(group)
        first = Snapshot("1", listeners=[inbound_listener(port, ads_source())],
                         clusters=[static_cluster("backend", tcp_address(echo))],
                         secrets=[certificate_secret(pki.mesh.backend), root_secret(pki)])
        xds.post(node, first)
        proxy = start_xds_proxy(group, XDS_KIND[kind], node, xds.xds_port, tmp_path)
        xds.wait_acked(node, first, proxy=proxy.proc)
        ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend)
        wait_for("the listener from LDS serves with the secret from ADS",
                 lambda: tls_get(port, ctx).peer_serial == pki.mesh.backend.serial)
        check_rotation_and_nack(xds, node, first, port, pki)
        proxy.proc.check_alive()


def test_a_listener_without_its_secret_closes_connections(kind: str, pki: Pki, tmp_path: Path):
    """No secret for this node yet: after initial_fetch_timeout (2 s) the
    proxy is LIVE; its listener closes each connection without a handshake
    and counts it in downstream_context_secrets_not_ready, as Envoy does;
    once the secret comes it serves."""
    node = f"sds-late-{kind}"
    sock = tmp_path / "sds.sock"
    port, admin = free_port(), free_port()
    with Group(tmp_path / "logs") as group:
        echo = Echoes(group).start("backend")
        xds = XdsServer.start(group, sds_unix=sock)
        bootstrap = istio_agent_bootstrap(node, admin=admin, port=port, echo=echo, sock=sock)
        start_proxy(group, kind, json.dumps(bootstrap, indent=1), tmp_path, port=port, admin=admin)
        ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend)
        assert tls_refusal(port, ctx) in ("closed", "reset"), "a connection before the secret came"
        wait_for("downstream_context_secrets_not_ready counts it",
                 lambda: counter(admin, "envoy_listener_server_ssl_socket_factory_downstream_context_secrets_not_ready",
                                 envoy_listener_address=f"127.0.0.1_{port}") >= 1)
        first = Snapshot("1", secrets=[certificate_secret(pki.mesh.backend), root_secret(pki)])
        xds.post(node, first)
        xds.wait_acked(node, first, types=["secrets"])
        wait_for("the secret came: served", lambda: tls_get(port, ctx).status == 200)


@pytest.mark.parametrize("kind", ["mesh", "mesh-pipelined"])
def test_certificate_files_an_sds_file_names_are_watched(kind: str, pki: Pki, tmp_path: Path):
    """The SDS file stays as it is; the certificate and key files it names
    are rewritten in place (a node agent that writes its files without a
    rename): new handshakes get the new certificate."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes(pki.mesh.backend.cert.read_bytes())
    key.write_bytes(pki.mesh.backend.key.read_bytes())
    sds = sds_certificate_file(tmp_path / "sds.yaml", "default", Pem("files", cert, key, pki.mesh.backend.serial))
    port, admin = free_port(), free_port()
    with Group(tmp_path / "logs") as group:
        echo = Echoes(group).start("backend")
        source = {"path_config_source": {"path": str(sds)}, "resource_api_version": "V3"}
        listener = inbound_listener(port, source)
        common = listener["filter_chains"][0]["transport_socket"]["typed_config"]["common_tls_context"]
        del common["combined_validation_context"]
        common["validation_context"] = {"trusted_ca": {"filename": str(pki.mesh.ca.cert)}}
        bootstrap = {"node": {"id": "files", "cluster": "dpukit"}, "admin": {"address": tcp_address(admin)},
                     "static_resources": {"listeners": [listener],
                                          "clusters": [static_cluster("backend", tcp_address(echo))]}}
        proxy: Proxy = start_proxy(group, kind, json.dumps(bootstrap, indent=1), tmp_path, port=port, admin=admin)
        ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend)
        assert tls_get(port, ctx).peer_serial == pki.mesh.backend.serial
        sds_stamp = os.stat(sds).st_mtime_ns
        rotated = pki.factory.issue("backend-in-place", pki.mesh.ca, uris=[BACKEND], dns=[BACKEND_DNS])
        with open(key, "r+b") as f:  # in place: the same inode, truncated and written
            f.truncate(0)
            f.write(rotated.key.read_bytes())
        with open(cert, "r+b") as f:
            f.truncate(0)
            f.write(rotated.cert.read_bytes())
        wait_for("a new handshake presents the certificate written in place",
                 lambda: tls_get(port, ctx).peer_serial == rotated.serial)
        assert os.stat(sds).st_mtime_ns == sds_stamp  # the SDS file itself never changed
        proxy.proc.check_alive()


def test_the_sds_server_killed_and_restarted(kind: str, pki: Pki, tmp_path: Path):
    """istio-agent killed (SIGKILL, its socket file left behind) and started
    again on the same path with a new certificate: meanwhile the proxy
    serves with the secret it has; then it reconnects and takes the new one."""
    node = f"sds-restart-{kind}"
    sock = tmp_path / "sds.sock"
    with Group(tmp_path / "logs") as group:
        xds, _, proxy = istio_agent_proxy(group, kind, node, pki, tmp_path, sock)
        port = proxy.port
        xds.proc.popen.kill()
        xds.proc.popen.wait(timeout=10)
        ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend)
        for _ in range(3):
            assert tls_get(port, ctx).peer_serial == pki.mesh.backend.serial
        sock.unlink()  # the dead server's socket file: a new server must bind anew, as istio-agent does
        xds = XdsServer.start(group, sds_unix=sock)
        rotated = pki.factory.issue(f"backend-{node}", pki.mesh.ca, uris=[BACKEND], dns=[BACKEND_DNS])
        second = Snapshot("2", secrets=[certificate_secret(rotated), root_secret(pki)])
        xds.post(node, second)
        xds.wait_acked(node, second, types=["secrets"], timeout=60)
        wait_for("a new handshake presents the certificate from the restarted server",
                 lambda: tls_get(port, ctx).peer_serial == rotated.serial)
        proxy.proc.check_alive()
