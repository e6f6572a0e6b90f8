"""Mutual TLS on the mesh: the certificates and the Envoy-format TLS
configuration that the tests (python/tests/test_mesh_tls.py) and the
``mesh.tls`` experiment share, and the experiment itself.

Certificates are made with the ``cryptography`` package as Istio's CA makes
them: a mesh root CA, workload certificates whose identity is a SPIFFE URI
SAN (``spiffe://cluster.local/ns/default/sa/NAME``), ECDSA P-256 keys. The
configuration pieces are Envoy v3 YAML: ``DownstreamTlsContext`` on a
listener's filter chain, ``UpstreamTlsContext`` on a cluster, certificates
from files or from SDS with a file source (``path_config_source``), and the
``tls_inspector`` listener filter with ``filter_chain_match`` so one
listener serves TLS and plaintext.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from dpukit.dpu_speed import ENV as DPU_SPEED_ENV
from dpukit.errors import DpukitError
from dpukit.experiment_support import add_chain_commands, error_note, fmt_mr, goal_rows
from dpukit.experiments import Context, experiment
from dpukit.mesh_harness import HCM as HCM_TYPE
from dpukit.mesh_harness import (DPU_CPU, H2_UPSTREAM, L4_TOPOLOGIES, LOADS, LOOPBACK, TOOL, TOPOLOGIES, Chain, Load,
                                 Phase, Sweep, Swept, Topology, collect_sweep, just, start_iperf_server, start_proxy,
                                 start_service)
from dpukit.plots import BarPanel, bars_plot
from dpukit.procs import free_port, http_get
from dpukit.report import Section
from dpukit.units import fmt_int, fmt_sig

TRUST_DOMAIN = "cluster.local"
TLS_SOCKET = "envoy.transport_sockets.tls"
TLS_TYPES = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3"
TLS_INSPECTOR = """\
    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector
"""


def spiffe_id(service_account: str, namespace: str = "default") -> str:
    """The SPIFFE identity Istio gives a workload of ``service_account``."""
    return f"spiffe://{TRUST_DOMAIN}/ns/{namespace}/sa/{service_account}"


# -- certificates ------------------------------------------------------------------


@dataclass(frozen=True)
class Pem:
    """A certificate and its key in PEM files."""

    name: str
    cert: Path
    key: Path
    serial: int


class CertFactory:
    """Makes CAs and the certificates they sign, as PEM files in ``directory``."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._keys: dict[str, object] = {}
        self._certs: dict[str, object] = {}

    def ca(self, name: str) -> Pem:
        """A self-signed root CA named ``name``."""
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, TRUST_DOMAIN),
                             x509.NameAttribute(NameOID.COMMON_NAME, name)])
        key = _new_key()
        now = _now()
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=3650))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
        return self._write(name, builder.sign(key, _hash()), key)

    def issue(self, name: str, ca: Pem, *, uris: Sequence[str] = (), dns: Sequence[str] = (),
              valid_from: datetime.datetime | None = None, valid_to: datetime.datetime | None = None) -> Pem:
        """A leaf certificate for ``name`` signed by ``ca``, usable by a server
        and a client (as Istio's workload certificates are), with URI and DNS
        SANs; valid from an hour ago for a day unless given."""
        from cryptography import x509
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = _now()
        key = _new_key()
        ca_cert, ca_key = self._certs[ca.name], self._keys[ca.name]
        sans = [x509.UniformResourceIdentifier(u) for u in uris] + [x509.DNSName(d) for d in dns]
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, TRUST_DOMAIN),
                                            x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(ca_cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(valid_from or now - datetime.timedelta(hours=1))
                   .not_valid_after(valid_to or now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                                content_commitment=False, data_encipherment=False,
                                                key_agreement=False, key_cert_sign=False, crl_sign=False,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False))
        if sans:
            # Istio's workload certificates have an empty subject and a critical SAN; ours keep a CN
            # for readable logs, so the SAN is not critical.
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return self._write(name, builder.sign(ca_key, _hash()), key)

    def expired(self, name: str, ca: Pem, *, uris: Sequence[str] = ()) -> Pem:
        """A certificate whose validity ended yesterday."""
        now = _now()
        return self.issue(name, ca, uris=uris, valid_from=now - datetime.timedelta(days=30),
                          valid_to=now - datetime.timedelta(days=1))

    def _write(self, name: str, cert, key) -> Pem:
        from cryptography.hazmat.primitives import serialization

        self._certs[name], self._keys[name] = cert, key
        cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        _write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        _write_atomic(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
        os.chmod(key_path, 0o600)
        return Pem(name, cert_path, key_path, cert.serial_number)


def _new_key():
    from cryptography.hazmat.primitives.asymmetric import ec
    return ec.generate_private_key(ec.SECP256R1())


def _hash():
    from cryptography.hazmat.primitives import hashes
    return hashes.SHA256()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``path`` by a rename, so a watcher never reads half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


@dataclass(frozen=True)
class MeshCerts:
    """The certificates of a two-workload mesh: the mesh CA, frontend's and
    backend's workload certificates (SPIFFE URI SANs; backend also names its
    DNS name for ``sni``)."""

    ca: Pem
    frontend: Pem
    backend: Pem


BACKEND_DNS = "backend.default.svc.cluster.local"


def mesh_certs(factory: CertFactory) -> MeshCerts:
    ca = factory.ca("mesh-ca")
    return MeshCerts(ca, factory.issue("frontend", ca, uris=[spiffe_id("frontend")]),
                     factory.issue("backend", ca, uris=[spiffe_id("backend")], dns=[BACKEND_DNS]))


# -- SDS with a file source ------------------------------------------------------------


def sds_certificate_file(path: Path, secret: str, pem: Pem) -> Path:
    """An SDS file (``path_config_source``) holding one ``tls_certificate``
    secret; written by a rename, as Envoy requires for its file watch (a
    rotation writes it again)."""
    _write_atomic(path, f"""\
resources:
- "@type": {TLS_TYPES}.Secret
  name: {secret}
  tls_certificate:
    certificate_chain: {{filename: {pem.cert}}}
    private_key: {{filename: {pem.key}}}
""")
    return path


def sds_validation_file(path: Path, secret: str, ca: Path) -> Path:
    """An SDS file holding one ``validation_context`` secret (the trusted CA)."""
    _write_atomic(path, f"""\
resources:
- "@type": {TLS_TYPES}.Secret
  name: {secret}
  validation_context:
    trusted_ca: {{filename: {ca}}}
""")
    return path


# -- TLS contexts (Envoy v3 YAML) --------------------------------------------------------


def _indent(text: str, n: int) -> str:
    return "".join((" " * n + line if line.strip() else line) for line in text.splitlines(True))


def common_tls_context(*, cert: Pem | None = None, sds: Path | None = None, secret: str = "default",
                       ca: Path | None = None, san_uris: Sequence[str] = (), alpn: Sequence[str] = (),
                       min_version: str = "", max_version: str = "", ciphers: Sequence[str] = ()) -> str:
    """A ``common_tls_context`` body (indented 0): the certificate from files
    (``cert``) or from the SDS file ``sds`` (secret ``secret``); the peer
    validated against ``ca`` with its URI SAN one of ``san_uris``."""
    out = ""
    if min_version or max_version or ciphers:
        out += "tls_params:\n"
        if min_version:
            out += f"  tls_minimum_protocol_version: {min_version}\n"
        if max_version:
            out += f"  tls_maximum_protocol_version: {max_version}\n"
        if ciphers:
            out += "  cipher_suites: [" + ", ".join(f'"{c}"' for c in ciphers) + "]\n"
    if alpn:
        out += "alpn_protocols: [" + ", ".join(f'"{p}"' for p in alpn) + "]\n"
    if cert is not None:
        out += f"tls_certificates:\n- certificate_chain: {{filename: {cert.cert}}}\n" \
               f"  private_key: {{filename: {cert.key}}}\n"
    if sds is not None:
        out += f"tls_certificate_sds_secret_configs:\n- name: {secret}\n" \
               f"  sds_config:\n    path_config_source: {{path: {sds}}}\n    resource_api_version: V3\n"
    if ca is not None:
        out += f"validation_context:\n  trusted_ca: {{filename: {ca}}}\n"
        if san_uris:
            out += "  match_typed_subject_alt_names:\n" + "".join(
                f"  - san_type: URI\n    matcher: {{exact: \"{u}\"}}\n" for u in san_uris)
    return out


# dpukit-mesh's transport socket that wraps the TLS one and puts its records'
# crypto on the BlueField's crypto engine (docs/mesh.md); Envoy has none.
CRYPTO_ENGINE_SOCKET = "dpukit.transport_sockets.crypto_engine"
CRYPTO_ENGINE_TYPE = "type.googleapis.com/dpukit.mesh.v1.CryptoEngineTransportSocket"


def crypto_engine(tls_socket: str, record_crypto: str) -> str:
    """``tls_socket`` (a ``transport_socket:`` body at column 0) wrapped by
    the crypto_engine socket with ``record_crypto`` (ENGINE or CORES); as it
    is when ``record_crypto`` is empty."""
    if not record_crypto:
        return tls_socket
    return f"""\
transport_socket:
  name: {CRYPTO_ENGINE_SOCKET}
  typed_config:
    "@type": {CRYPTO_ENGINE_TYPE}
    record_crypto: {record_crypto}
{_indent(tls_socket, 4)}"""


def downstream_tls(indent: int, *, require_client_certificate: bool = True, record_crypto: str = "",
                   **common) -> str:
    """A filter chain's ``transport_socket`` with a DownstreamTlsContext,
    indented ``indent`` (the column of ``transport_socket:``); wrapped by the
    crypto_engine socket when ``record_crypto`` is given (dpukit-mesh only)."""
    body = f"""\
transport_socket:
  name: {TLS_SOCKET}
  typed_config:
    "@type": {TLS_TYPES}.DownstreamTlsContext
    require_client_certificate: {str(require_client_certificate).lower()}
    common_tls_context:
{_indent(common_tls_context(**common), 6)}"""
    return _indent(crypto_engine(body, record_crypto), indent)


def upstream_tls(indent: int, *, sni: str = "", record_crypto: str = "", **common) -> str:
    """A cluster's ``transport_socket`` with an UpstreamTlsContext, indented
    ``indent``; wrapped by the crypto_engine socket when ``record_crypto`` is given."""
    body = f"""\
transport_socket:
  name: {TLS_SOCKET}
  typed_config:
    "@type": {TLS_TYPES}.UpstreamTlsContext
""" + (f"    sni: {sni}\n" if sni else "") + f"""\
    common_tls_context:
{_indent(common_tls_context(**common), 6)}"""
    return _indent(crypto_engine(body, record_crypto), indent)


TCP_PROXY_TYPE = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"


def hcm_filter(cluster: str, *, stat_prefix: str = "ingress_http", indent: int = 6, http_filters: str = "") -> str:
    """An http_connection_manager (codec AUTO: HTTP/1.1, and HTTP/2 by ALPN or
    preface) routing every request to ``cluster``, as a ``filters`` list item;
    ``http_filters``: list items (indented 0) before the router."""
    return _indent(f"""\
- name: envoy.filters.network.http_connection_manager
  typed_config:
    "@type": {HCM_TYPE}
    stat_prefix: {stat_prefix}
    route_config:
      name: local_route
      virtual_hosts:
      - name: all
        domains: ["*"]
        routes:
        - match: {{prefix: "/"}}
          route: {{cluster: {cluster}}}
    http_filters:
{_indent(http_filters, 4)}    - name: envoy.filters.http.router
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
""", indent)


def tcp_proxy_filter(cluster: str, *, indent: int = 6) -> str:
    """A tcp_proxy to ``cluster``, as a ``filters`` list item."""
    return _indent(f"""\
- name: envoy.filters.network.tcp_proxy
  typed_config:
    "@type": {TCP_PROXY_TYPE}
    stat_prefix: l4
    cluster: {cluster}
""", indent)


@dataclass(frozen=True)
class FilterChain:
    """One filter chain: its network filters (from hcm_filter / tcp_proxy_filter),
    a DownstreamTlsContext transport socket (from downstream_tls(6)) or
    none, and its filter_chain_match fields (YAML flow values)."""

    filters: str
    transport_socket: str = ""
    match: dict[str, str] | None = None
    name: str = ""

    def yaml(self) -> str:
        out = f"    - name: {self.name}\n" if self.name else "    - "
        first = not self.name
        if self.match:
            out += ("" if first else "      ") + "filter_chain_match:\n" + "".join(
                f"        {k}: {v}\n" for k, v in self.match.items())
            first = False
        out += ("" if first else "      ") + "filters:\n" + self.filters
        return out + self.transport_socket


def listener(name: str, port: int, chains: Sequence[FilterChain], *, inspector: bool = False) -> str:
    """A listener on 127.0.0.1:``port`` (a ``static_resources.listeners`` item)."""
    return (f"""\
  - name: {name}
    address:
      socket_address: {{address: 127.0.0.1, port_value: {port}}}
""" + (TLS_INSPECTOR if inspector else "") + "    filter_chains:\n" + "".join(c.yaml() for c in chains))


def tls_cluster(name: str, port: int, *, transport_socket: str = "", http2: bool = False) -> str:
    """A STATIC cluster of one endpoint on 127.0.0.1:``port`` (a
    ``static_resources.clusters`` item), with a transport socket from
    upstream_tls(4) and HTTP/2 upstream when ``http2``."""
    h2 = H2_UPSTREAM if http2 else ""
    return f"""\
  - name: {name}
    connect_timeout: 1s
    type: STATIC
{h2}    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{address: 127.0.0.1, port_value: {port}}}
{transport_socket}"""


def tls_bootstrap(*, admin: int, listeners: Sequence[str], clusters: Sequence[str], node: str = "node") -> str:
    """A bootstrap of ``listeners`` (from listener()) and ``clusters`` (from tls_cluster())."""
    return f"""\
node: {{id: {node}, cluster: dpukit}}
admin:
  address:
    socket_address: {{address: 127.0.0.1, port_value: {admin}}}
static_resources:
  listeners:
{"".join(listeners)}  clusters:
{"".join(clusters)}"""


# -- the mesh.tls experiment ---------------------------------------------------------------
#
# Three parts, each a sweep (the harness's paired, interleaved rounds):
# handshakes per second per proxy CPU (openssl s_time against one mTLS
# listener); bulk TCP over mTLS through two tcp_proxy hops (iperf3); and the
# request path over the two-node topology, client → proxy A → mTLS → proxy B → service,
# where A and B are either two Envoy sidecars (Istio's model, host CPU) or
# two dpukit-mesh node proxies (each node's dpu place). Everything a chain
# writes (certificates, SDS files, configurations, logs) is in its work
# directory, which the harness's run_chain removes. The sweeps are data
# (sweeps()); collect_sweep runs them, a pure ``render`` makes the section
# from their runs alone, so that ``dpukit eval --render`` rebuilds it.

# The issue's goals for the two-node mTLS path against the mTLS sidecar pair.
GOAL_QPS, GOAL_P99, GOAL_HOST_CPU = 3.0, 0.3, 0.2
FIXED_QPS = 1000  # the rate of the added-p99 goal (as mesh.quick)
# Bulk through the node pair with its records on the crypto engine: dpu CPU
# per byte (the engine's hw time taken out) below this × the pair on the
# cores (it was a unit test's threshold, test_mesh_tls_engine.py; a timing
# figure, measured here).
GOAL_BULK_ENGINE_DPU = 0.95
SECONDS_ENV = "DPUKIT_MESH_TLS_SECONDS"  # each load phase's length (default 3 quick, 5 full; the test uses 1)


def chain_certs(chain: Chain) -> tuple[MeshCerts, Path, Path]:
    """The chain's mesh CA and workload certificates, and the SDS files of
    frontend's (client side) and backend's (server side) certificate."""
    work = chain.work_dir / "certs"
    certs = mesh_certs(CertFactory(work))
    return (certs, sds_certificate_file(work / "sds-frontend.yaml", "default", certs.frontend),
            sds_certificate_file(work / "sds-backend.yaml", "default", certs.backend))


def server_side_yaml(certs: MeshCerts, sds: Path, *, listen: int, admin: int, service: int, l4: bool,
                     node: str, record_crypto: str = "") -> str:
    """Node B: an mTLS listener (backend's certificate by SDS, frontend's
    SPIFFE identity required) in front of the service; its records on the
    crypto engine with ``record_crypto="ENGINE"``."""
    tls = downstream_tls(6, sds=sds, ca=certs.ca.cert, san_uris=[spiffe_id("frontend")], alpn=["h2", "http/1.1"],
                         record_crypto=record_crypto)
    filters = tcp_proxy_filter("service") if l4 else hcm_filter("service")
    return tls_bootstrap(admin=admin, node=node, listeners=[listener("inbound", listen, [FilterChain(filters, tls)])],
                         clusters=[tls_cluster("service", service)])


def client_side_yaml(certs: MeshCerts, sds: Path, *, listen: int, admin: int, peer: int, l4: bool, node: str,
                     record_crypto: str = "") -> str:
    """Node A: a plaintext listener whose cluster reaches node B over mTLS
    (frontend's certificate by SDS, backend's SPIFFE identity required)."""
    tls = upstream_tls(4, sds=sds, ca=certs.ca.cert, san_uris=[spiffe_id("backend")], sni=BACKEND_DNS,
                       record_crypto=record_crypto)
    filters = tcp_proxy_filter("peer") if l4 else hcm_filter("peer")
    return tls_bootstrap(admin=admin, node=node, listeners=[listener("outbound", listen, [FilterChain(filters)])],
                         clusters=[tls_cluster("peer", peer, transport_socket=tls)])


# (kind, names of proxy A and B, place)
PAIRS = {"envoy-sidecars": ("envoy", "client-sidecar", "server-sidecar", "host"),
         "node-proxy-pair": ("mesh", "node-proxy-a", "node-proxy-b", "dpu")}
# The node pair with both ends' mTLS records on the BlueField's crypto engine
# (dpukit.transport_sockets.crypto_engine, record_crypto: ENGINE), beside the
# pair with its records on the cores.
ENGINE_PAIR = "node-proxy-pair-engine"
PAIRS[ENGINE_PAIR] = PAIRS["node-proxy-pair"]


def engine_admins(chain: Chain) -> tuple[int, ...]:
    """The admin ports of the chain's proxies whose records are on the engine (none for other chains)."""
    return getattr(chain, "engine_admins", ())


def mtls_pair(name: str, start_server: Callable[[Chain], int], l4: bool) -> Callable[[Chain], None]:
    """client → A → mTLS → B → the service ``start_server`` starts."""
    kind, a_name, b_name, place = PAIRS[name]
    record_crypto = "ENGINE" if name == ENGINE_PAIR else ""

    def start(chain: Chain) -> None:
        service = start_server(chain)
        certs, sds_a, sds_b = chain_certs(chain)
        b_listen, b_admin, a_listen, a_admin = (free_port() for _ in range(4))
        start_proxy(chain, b_name, kind, server_side_yaml(certs, sds_b, listen=b_listen, admin=b_admin,
                                                              service=service, l4=l4, node=b_name,
                                                              record_crypto=record_crypto),
                        b_listen, b_admin, place)
        start_proxy(chain, a_name, kind, client_side_yaml(certs, sds_a, listen=a_listen, admin=a_admin,
                                                              peer=b_listen, l4=l4, node=a_name,
                                                              record_crypto=record_crypto),
                        a_listen, a_admin, place)
        chain.entry_port, chain.admin_port = a_listen, a_admin
        if record_crypto:
            chain.engine_admins = (a_admin, b_admin)  # type: ignore[attr-defined]  # read by the +hw loads

    return start


def engine_left_out() -> str:
    """Why the engine pair cannot run at this eval's dpu speed ("" when it can):
    the engine is a BlueField generation's (the proxy refuses it otherwise)."""
    speed = os.environ.get(DPU_SPEED_ENV) or "host"
    if speed.startswith("bluefield"):
        return ""
    return (f"record crypto on the crypto engine is a BlueField generation's: the dpu speed `{speed}` names none "
            "(run `dpukit eval --dpu bluefield3`)")


def request_topologies(engine: bool = False) -> tuple[Topology, ...]:
    """The request path's chains; with ``engine``, the node pair with its records on the crypto engine too."""
    return (next(t for t in TOPOLOGIES if t.name == "direct"),
            Topology("envoy-sidecars", "client → Envoy sidecar → mTLS → Envoy sidecar → service (Istio's model)",
                     mtls_pair("envoy-sidecars", start_service, l4=False)),
            Topology("node-proxy-pair", "client → dpukit-mesh node proxy A → mTLS → node proxy B → service (two "
                     "nodes emulated on this machine)", mtls_pair("node-proxy-pair", start_service, l4=False)),
            *((Topology(ENGINE_PAIR, "the node-proxy pair with both ends' mTLS records on the BlueField's crypto "
                        "engine (record_crypto: ENGINE)", mtls_pair(ENGINE_PAIR, start_service, l4=False)),)
              if engine else ()))


def bulk_topologies(engine: bool = False) -> tuple[Topology, ...]:
    return (L4_TOPOLOGIES[0],  # iperf3 client → iperf3 server
            Topology("envoy-sidecars", "Envoy tcp_proxy → mTLS → Envoy tcp_proxy → iperf3 server",
                     mtls_pair("envoy-sidecars", start_iperf_server, l4=True)),
            Topology("node-proxy-pair", "dpukit-mesh tcp_proxy → mTLS → dpukit-mesh tcp_proxy → iperf3 server",
                     mtls_pair("node-proxy-pair", start_iperf_server, l4=True)),
            *((Topology(ENGINE_PAIR, "the same with both ends' mTLS records on the crypto engine",
                        mtls_pair(ENGINE_PAIR, start_iperf_server, l4=True)),) if engine else ()))


def with_engine(topologies: Callable[[bool], tuple[Topology, ...]]) -> Callable[[bool], tuple[list[Topology],
                                                                                                  dict[str, str]]]:
    """A sweep's selection: the chains, and the engine pair where the dpu speed has the engine."""
    def select(quick: bool) -> tuple[list[Topology], dict[str, str]]:
        why = engine_left_out()
        return list(topologies(not why)), ({ENGINE_PAIR: why} if why else {})
    return select


def handshake_server(kind: str, name: str, place: str) -> Callable[[Chain], None]:
    """One proxy with one mTLS listener (the server side of a handshake)."""

    def start(chain: Chain) -> None:
        service = start_service(chain)
        certs, _, sds_b = chain_certs(chain)
        listen, admin = free_port(), free_port()
        start_proxy(chain, name, kind, server_side_yaml(certs, sds_b, listen=listen, admin=admin,
                                                            service=service, l4=False, node=name),
                        listen, admin, place)
        chain.entry_port, chain.admin_port = listen, admin

    return start


def openssl_s_server(chain: Chain) -> None:
    """OpenSSL's own test server on the dpu CPU, with the same certificate
    and the client's certificate required: what a handshake costs in the
    OpenSSL 3 that dpukit-mesh links, without a proxy around it."""
    certs, _, _ = chain_certs(chain)
    port = free_port()
    proc = chain.group.start(["openssl", "s_server", "-quiet", "-accept", str(port), "-cert", certs.backend.cert,
                              "-key", certs.backend.key, "-CAfile", certs.ca.cert, "-Verify", "1"],
                             name="openssl-s_server", cpus=DPU_CPU, place="dpu")
    proc.wait_port(port)
    chain.entry_port = port


HANDSHAKE_TOPOLOGIES = (
    Topology("envoy", "one Envoy mTLS listener (a sidecar's inbound side; BoringSSL)",
             handshake_server("envoy", "envoy", "host")),
    Topology("node-proxy", "one dpukit-mesh mTLS listener (OpenSSL 3)", handshake_server("mesh", "node-proxy", "dpu")),
    Topology("openssl-s_server", "`openssl s_server -Verify 1`: the library alone, for reference", openssl_s_server),
)

# (what, openssl s_time mode, its extra options)
HANDSHAKE_MODES = (("full, TLS 1.3", "-new", ()), ("full, TLS 1.2", "-new", ("-tls1_2",)),
                   ("resumed (session ticket), TLS 1.2", "-reuse", ("-tls1_2",)))


def parse_s_time(stdout: str, _json: str = "") -> dict[str, Any]:
    """Figures from ``openssl s_time``: connections made and how many
    resumed a session (its progress marks: ``r`` reused, ``*`` new)."""
    # The rate is "inf" when the client spent under 10 ms of user time (few handshakes on a busy machine).
    m = re.search(r"^(\d+) connections in ([\d.]+)s; ([\d.]+|inf) connections/user sec", stdout, re.M)
    if not m:
        raise DpukitError(f"openssl s_time output without its summary:\n{stdout[-2000:]}")
    marks = "".join(re.findall(r"^[r*]+$", stdout, re.M))
    n = int(m.group(1))
    return {"requests": n, "connections": n, "reused": marks.count("r"), "client_user_s": float(m.group(2)),
            "errors": 0, "non_2xx": 0}


def s_time_load(chain: Chain, mode: str, seconds: int) -> Load:
    """``openssl s_time`` against the chain with the client's certificate: handshakes of ``mode`` (HANDSHAKE_MODES)."""
    flag, extra = next((flag, extra) for what, flag, extra in HANDSHAKE_MODES if what == mode)
    certs = chain.work_dir / "certs"
    argv = ["openssl", "s_time", "-connect", f"{LOOPBACK}:{chain.entry_port}", flag, "-time", str(seconds),
            "-cert", str(certs / "frontend.crt"), "-key", str(certs / "frontend.key"), "-CAfile",
            str(certs / "mesh-ca.crt"), *extra]
    return Load("openssl s_time", argv, seconds, parse_s_time)


# openssl s_time as a load of the harness's sweeps (its registry of load generators by name).
LOADS["s_time"] = lambda chain, p: s_time_load(chain, p["mode"], p["seconds"])


def _proxy_cpu_s(r: dict[str, Any], names: Sequence[str]) -> float:
    return sum(r["figures"]["process_cpu_ns"].get(n, 0) for n in names) / 1e9


def engine_hw_ns(admin: int) -> int:
    """A proxy's crypto-engine time so far (its /stats' dpukit.mesh.record_crypto_engine.hw_ns)."""
    status, text = http_get(f"http://{LOOPBACK}:{admin}/stats")
    if status != 200:
        raise DpukitError(f"admin :{admin}/stats answered {status}")
    m = re.search(r"^dpukit\.mesh\.record_crypto_engine\.hw_ns: (\d+)$", text, re.M)
    return int(m.group(1)) if m else 0


def with_hw(load: str) -> Callable[[Chain, dict[str, Any]], Load]:
    """The load ``load`` that also reports ``hw_cpu_ns``: the crypto engine's
    time in the chain's proxies during it (read from their admin just before
    the load and after it). The engine's work runs on the proxies' own
    threads, so the processes' CPU holds it; hw_cpu_ns is the part of their
    dpu CPU that is the hw place's (0 where no record is on the engine)."""
    def make(chain: Chain, p: dict[str, Any]) -> Load:
        inner = LOADS[load](chain, p)
        admins = engine_admins(chain)
        before = sum(engine_hw_ns(a) for a in admins)

        def parse(stdout: str, json_text: str = "") -> dict[str, Any]:
            figures = inner.parse(stdout, json_text)
            figures["hw_cpu_ns"] = sum(engine_hw_ns(a) for a in admins) - before
            return figures

        return dataclasses.replace(inner, parse=parse)
    return make


for _load in ("wrk", "fortio", "iperf3"):
    LOADS[f"{_load}+hw"] = with_hw(_load)


def hw_ns(r: dict[str, Any]) -> int:
    return r["figures"].get("hw_cpu_ns", 0)


def dpu_ms_per_1k(r: dict[str, Any]) -> float:
    """dpu CPU per 1,000 requests, the engine's time taken out (it is hw)."""
    return (r["cpu_ns"]["dpu"] - hw_ns(r)) / r["figures"]["requests"] / 1e3


def hw_ms_per_1k(r: dict[str, Any]) -> float:
    return hw_ns(r) / r["figures"]["requests"] / 1e3


# -- collect: the three parts as sweeps ----------------------------------------------------


def sweeps(seconds: int, quick: bool) -> tuple[Sweep, Sweep, Sweep]:
    """Handshakes (each mode against one listener), bulk (iperf3 streams) and
    the request path (wrk's max qps, then fortio at fixed rates), each phase
    ``seconds`` long."""
    streams = (1, 4) if quick else (1, 4, 16)
    rates = (FIXED_QPS,) if quick else (FIXED_QPS, 2 * FIXED_QPS)
    return (Sweep(just(HANDSHAKE_TOPOLOGIES),
                  (Phase("s_time", {"seconds": seconds}, "mode", tuple(m[0] for m in HANDSHAKE_MODES)),)),
            Sweep(with_engine(bulk_topologies), (Phase("iperf3+hw", {"seconds": seconds}, "streams", streams),)),
            Sweep(with_engine(request_topologies), (Phase("wrk+hw", {"connections": 16, "seconds": seconds}),
                                                    Phase("fortio+hw", {"connections": 8, "seconds": seconds}, "qps",
                                                          rates))))


# -- render -------------------------------------------------------------------------------


def render(ctx: Context, handshakes: Swept, bulk: Swept, request: Swept) -> Section:
    """The section from the three sweeps' runs alone (nothing runs)."""
    seconds, rounds = request.phases[0].fixed["seconds"], request.rounds
    sec = Section("mesh.tls: mutual TLS between node proxies against the mTLS sidecar pair")
    sec.paragraph(
        "Certificates as Istio's CA gives them: a mesh root CA and workload certificates whose identity is a SPIFFE "
        f"URI SAN (`{spiffe_id('frontend')}` on the client side, `{spiffe_id('backend')}` on the server side), "
        "ECDSA P-256, delivered by SDS from a file (`path_config_source`); every listener requires the client's "
        "certificate and checks its SAN, every client side checks the server's. The same certificates and the same "
        "Envoy v3 configuration for Envoy 1.40 and dpukit-mesh. The load generator and the services run on CPU 0 "
        "(host); every proxy is pinned to CPU 1: Envoy with `--concurrency 1` under `taskset`, dpukit-mesh with "
        "`--workers 1 --dpu-cpus 1`. Two nodes are emulated on this machine, so both node proxies share the one dpu "
        "CPU, as both sidecars do. "
        + ("Quick mode: one round per point." if rounds == 1 else
           f"{rounds} paired, interleaved rounds (topology after topology, then again); each cell is the median "
           "with the range of the rounds in parentheses."))

    # 1. Handshakes.
    rows = []
    for name in handshakes.names:
        for what in handshakes.points():
            rs = handshakes.runs(name, 0, what)
            rows.append([name, what,
                         fmt_mr([r["figures"]["connections"] / (r["wall_ns"] / 1e9) for r in rs]),
                         fmt_mr([r["figures"]["connections"] / _proxy_cpu_s(r, [name]) for r in rs]),
                         fmt_mr([1e6 * _proxy_cpu_s(r, [name]) / r["figures"]["connections"] for r in rs]),
                         fmt_mr([100 * r["figures"]["reused"] / r["figures"]["connections"] for r in rs])])
    sec.table(["server", "handshake", "handshakes / s", "handshakes per proxy CPU-second", "proxy CPU µs / handshake",
               "resumed %"], rows,
              caption="mTLS handshakes against one listener (`openssl s_time` with the client's certificate)")
    sec.paragraph(
        f"`openssl s_time -connect ... -new|-reuse -time {seconds} -cert frontend.crt -key frontend.key -CAfile "
        "mesh-ca.crt` on CPU 0; every connection is a handshake and nothing more. s_time is one process that does "
        "the client's half of every handshake on one CPU, so the rate is the client's; the proxy's own cost is its "
        "CPU per handshake, and handshakes per proxy CPU-second is the rate one dpu CPU would sustain. For the node "
        "proxy that CPU is the dpu's; for Envoy it is the host's (a sidecar runs in the pod). Resumption is measured "
        "with TLS 1.2 tickets: `s_time -reuse` never reads, so it never receives a TLS 1.3 ticket (a TLS 1.3 "
        "resumption is shown by the tests, with `openssl s_client -sess_in`). `openssl-s_server` is OpenSSL's own "
        "test server with the same certificates, on the same CPU: the cost of a handshake in the library dpukit-mesh "
        "links (Envoy links BoringSSL).")

    # 2. Bulk.
    def per_gb(r: dict[str, Any], place: str) -> float:
        # The engine's time is in the proxies' process CPU; it is the hw place's, not the dpu's.
        ns = {"host": r["cpu_ns"]["host"], "dpu": r["cpu_ns"]["dpu"] - hw_ns(r), "hw": hw_ns(r)}[place]
        return ns / 1e9 / (r["figures"]["bytes"] / 1e9)

    sec.table(["topology", "streams", "Gbps", "host CPU s / GB", "dpu CPU s / GB", "hw CPU s / GB"],
              [[name, n, fmt_mr([r["figures"]["gbps"] for r in bulk.runs(name, 0, n)]),
                fmt_mr([per_gb(r, "host") for r in bulk.runs(name, 0, n)]),
                fmt_mr([per_gb(r, "dpu") for r in bulk.runs(name, 0, n)]),
                fmt_mr([per_gb(r, "hw") for r in bulk.runs(name, 0, n)])]
               for name in bulk.names for n in bulk.points()],
              caption="TCP through tcp_proxy, proxy A → mTLS → proxy B (iperf3)")
    sec.paragraph(
        f"`iperf3 -c -t {seconds} -P N -J` on CPU 0 against `iperf3 -s` on CPU 0. " + "; ".join(
            f"`{t.name}`: {t.description}" for t in bulk.topologies) + ". CPU is per GB received; the Envoy "
        "sidecars count as host CPU, the node proxies as dpu CPU, less the time of their records' crypto where it is "
        "on the crypto engine (hw CPU: the engine's work, done by OpenSSL on the proxy's thread and not dilated). "
        "Elsewhere the record crypto is OpenSSL's AES-GCM on the dpu CPU." + _left_out(bulk))

    # 3. The request path: phase 0 is wrk's max qps, phase 1 fortio at each fixed rate.
    names, rates = request.names, request.points(1)
    wrk = {n: request.runs(n, 0) for n in names}

    def col(runs: list[dict[str, Any]], key: str) -> str:
        if key == "dpu_cpu_ms_per_1k":
            return fmt_mr([dpu_ms_per_1k(r) for r in runs])
        if key == "hw_cpu_ms_per_1k":
            return fmt_mr([hw_ms_per_1k(r) for r in runs])
        return fmt_mr([r["figures"][key] for r in runs])

    sec.table(["topology", "max qps (wrk)", "host CPU ms / 1k req", "dpu CPU ms / 1k req", "hw CPU ms / 1k req",
               "errors", "non-2xx"],
              [[n, col(wrk[n], "qps"), col(wrk[n], "host_cpu_ms_per_1k"), col(wrk[n], "dpu_cpu_ms_per_1k"),
                col(wrk[n], "hw_cpu_ms_per_1k"), fmt_int(sum(r["figures"]["errors"] for r in wrk[n])),
                fmt_int(sum(r["figures"]["non_2xx"] for r in wrk[n]))] for n in names],
              caption="The request path over mTLS: maximum rate (wrk, 16 connections) and CPU per 1,000 requests")
    sec.table(["topology", "offered qps", "achieved", "p50 ms", "p99 ms", "p99.9 ms", "host CPU ms / 1k req",
               "dpu CPU ms / 1k req", "hw CPU ms / 1k req"],
              [[n, fmt_int(q)] + [col(request.runs(n, 1, q), key) for key in
                                  ("qps", "p50_ms", "p99_ms", "p99_9_ms", "host_cpu_ms_per_1k", "dpu_cpu_ms_per_1k",
                                   "hw_cpu_ms_per_1k")]
               for q in rates for n in names],
              caption="The request path over mTLS at fixed rates (fortio, 8 connections)")
    if ENGINE_PAIR in names:
        engine_table(sec, request, bulk)
    sec.paragraph("; ".join(f"`{t.name}`: {t.description}" for t in request.topologies) + ". " +
                  f"Max qps: `wrk -t1 -c16 -d{seconds}s`; latency: `fortio load -qps Q -c 8 -t {seconds}s`. host CPU "
                  "counts the service and, for the sidecar pair, both Envoys; dpu CPU counts both node proxies, less "
                  "the crypto engine's time (hw CPU)." + _left_out(request))
    goals = goal_rows(request.topologies, wrk, {n: request.runs(n, 1, FIXED_QPS) for n in names})
    sec.table(["node proxies", f"max qps × sidecars' (goal ≥ {GOAL_QPS:g})",
               f"added p99 at {FIXED_QPS} qps × sidecars' (goal ≤ {GOAL_P99:g})",
               f"host CPU / 1k req × sidecars' (goal ≤ {GOAL_HOST_CPU:g})"],
              [[g[0], f"{g[1]}: {_met(g[1], GOAL_QPS, True)}", f"{g[2]}: {_met(g[2], GOAL_P99, False)}",
                f"{g[3]}: {_met(g[3], GOAL_HOST_CPU, False)}"] for g in goals],
              caption="The issue's goals as paired ratios: each round's node-proxy pair against the same round's "
                      "mTLS sidecar pair (median, range)")
    pairs = [n for n in PAIRS if n in wrk]
    busy = {name: fmt_mr([100 * _proxy_cpu_s(r, PAIRS[name][1:3]) / (r["wall_ns"] / 1e9) for r in wrk[name]])
            for name in pairs}
    sec.paragraph(f"Added p99 is a topology's p99 at {FIXED_QPS} qps minus the same round's direct p99. At the "
                  "maximum rate the two proxies together kept the dpu CPU busy "
                  + ", ".join(f"{busy[n]} % (`{n}`)" for n in pairs)
                  + ". Below 100 %, the rate is not bound by the proxies' CPU time alone: each request crosses two "
                    "proxies that share the one CPU and wakes each in turn, and any other program on that CPU "
                    "delays them.")

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r["figures"][key] for r in runs)

    path, rel = ctx.plot_path("request-path")
    bars_plot(path, [
        BarPanel("max qps (wrk, 16 conns)", "requests / s", {"": [med(wrk[n], "qps") for n in names]},
                 fmt=lambda v: fmt_sig(v / 1000) + "k"),
        BarPanel(f"p99 at {FIXED_QPS} qps", "ms", {"": [med(request.runs(n, 1, FIXED_QPS), "p99_ms") for n in names]}),
        BarPanel("host CPU per 1k req (max qps)", "ms", {"": [med(wrk[n], "host_cpu_ms_per_1k") for n in names]}),
        BarPanel("dpu CPU per 1k req (max qps)", "ms", {"": [med(wrk[n], "dpu_cpu_ms_per_1k") for n in names]}),
    ], names, title="The request path over mTLS", ncols=2, highlight="node-proxy-pair")
    sec.image(rel, "Max qps, p99 and CPU per 1,000 requests over mTLS", "Max qps (wrk), p99 at "
              f"{FIXED_QPS} qps (fortio), host and dpu CPU ms per 1,000 requests at max qps.")
    records = [*handshakes.records, *bulk.records, *request.records]
    sec.paragraph(error_note(records))
    add_chain_commands(sec, records)
    return sec


def _left_out(swept: Swept) -> str:
    return "".join(f" `{name}` is left out: {why}." for name, why in swept.left_out.items())


def engine_table(sec: Section, request: Swept, bulk: Swept) -> None:
    """The node pair with its records on the crypto engine beside the pair with them on the cores: paired ratios
    of each round (engine / cores)."""
    cores, engine = "node-proxy-pair", ENGINE_PAIR

    def ratio(a: list[dict[str, Any]], b: list[dict[str, Any]], value: Callable[[dict[str, Any]], float]) -> str:
        return fmt_mr([value(x) / value(y) for x, y in zip(a, b)])

    wrk_c, wrk_e = request.runs(cores, 0), request.runs(engine, 0)
    fix_c, fix_e = request.runs(cores, 1, FIXED_QPS), request.runs(engine, 1, FIXED_QPS)
    rows = []
    for name, w, f in ((cores, wrk_c, fix_c), (engine, wrk_e, fix_e)):
        rows.append([name, fmt_mr([r["figures"]["qps"] for r in w]), fmt_mr([r["figures"]["p50_ms"] for r in f]),
                     fmt_mr([r["figures"]["p99_ms"] for r in f]), fmt_mr([dpu_ms_per_1k(r) for r in w]),
                     fmt_mr([hw_ms_per_1k(r) for r in w])])
    rows.append(["engine / cores (paired)", ratio(wrk_e, wrk_c, lambda r: r["figures"]["qps"]),
                 ratio(fix_e, fix_c, lambda r: r["figures"]["p50_ms"]),
                 ratio(fix_e, fix_c, lambda r: r["figures"]["p99_ms"]), ratio(wrk_e, wrk_c, dpu_ms_per_1k), ""])
    sec.table(["node pair, records", "max qps", f"p50 ms at {FIXED_QPS} qps", f"p99 ms at {FIXED_QPS} qps",
               "dpu CPU ms / 1k req (max qps)", "hw CPU ms / 1k req (max qps)"], rows,
              caption="Record crypto on the BlueField's crypto engine against on the dpu cores (the request path)")
    streams = bulk.points()[-1]
    b_c, b_e = bulk.runs(cores, 0, streams), bulk.runs(engine, 0, streams)

    def dpu_per_gb(r: dict[str, Any]) -> float:
        return (r["cpu_ns"]["dpu"] - hw_ns(r)) / r["figures"]["bytes"]

    per_gb = [dpu_per_gb(e) / dpu_per_gb(c) for e, c in zip(b_e, b_c)]
    met = "met" if per_gb and statistics.median(per_gb) < GOAL_BULK_ENGINE_DPU else "missed"
    sec.paragraph(
        f"Bulk ({streams} iperf3 streams): {fmt_mr([r['figures']['gbps'] for r in b_e])} Gbps with the engine, "
        f"{fmt_mr([r['figures']['gbps'] for r in b_c])} on the cores; dpu CPU per GB with the engine / on the cores "
        f"{ratio(b_e, b_c, dpu_per_gb)} (paired; goal below {GOAL_BULK_ENGINE_DPU:g}: {met}), the engine's hw CPU "
        f"{fmt_mr([hw_ns(r) / r['figures']['bytes'] for r in b_e])} s / GB. With the engine the dpu pays no "
        "record crypto, as a ConnectX-6 Dx / BlueField's kTLS offload does: OpenSSL's AES-GCM of each record "
        "(nonce, AAD, payload, tag) runs on the proxy's thread (its bytes are OpenSSL's), is not dilated, and "
        "counts as hw CPU. The handshake, the records' framing and the copies stay on the dpu cores "
        "(docs/mesh.md).")


def _met(cell: str, goal: float, at_least: bool) -> str:
    """'met' or 'missed' for a goal cell ('median (range)') from mesh.goal_rows."""
    med = float(cell.split()[0].replace(",", ""))
    return "met" if (med >= goal if at_least else med <= goal) else "missed"


@experiment(
    "mesh.tls",
    title="mesh.tls: mutual TLS between node proxies against the mTLS sidecar pair",
    description="Full and resumed mTLS handshakes per second per proxy CPU (openssl s_time), bulk Gbps and CPU per GB "
                "through two tcp_proxy hops over mTLS (iperf3), and the request path client → node proxy A → mTLS → "
                "node proxy B → service against the Envoy sidecar pair with the same certificates (max qps, added "
                "p99, host and dpu CPU per 1,000 requests), with the issue's goals.",
    tools=[TOOL],
)
def tls(ctx: Context) -> Section:
    seconds = int(os.environ.get(SECONDS_ENV) or (3 if ctx.quick else 5))
    handshakes, bulk, request = [collect_sweep(ctx, s) for s in sweeps(seconds, ctx.quick)]
    return render(ctx, handshakes, bulk, request)
