"""The throw-away PKI and the control plane's pure naming decisions (no processes started)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testbed.controlplane import (
    APISERVER_DNS_NAMES,
    apiserver_subject_alternative_names,
    host_for_clients,
    https_url,
)
from testbed.pki import ClusterPKI, file_stem


@pytest.fixture
def pki(tmp_path: Path) -> ClusterPKI:
    return ClusterPKI.create(tmp_path / "pki")


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_ca_is_a_self_signed_authority(pki: ClusterPKI) -> None:
    ca = _load(pki.ca_cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ca.verify_directly_issued_by(ca)
    assert ca.not_valid_before_utc < datetime.datetime.now(datetime.UTC) < ca.not_valid_after_utc


def test_client_certificate_names_user_and_groups(pki: ClusterPKI) -> None:
    cert_path, key_path = pki.issue_client_cert("system:node:worker-1", ["system:nodes"])
    certificate = _load(cert_path)
    certificate.verify_directly_issued_by(_load(pki.ca_cert))
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:worker-1"
    assert certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert key_path.stat().st_mode & 0o077 == 0
    assert cert_path.name == "system-node-worker-1.crt"


def test_serving_certificate_is_valid_for_its_names(pki: ClusterPKI) -> None:
    cert_path, _ = pki.issue_serving_cert("api", ["localhost", "kubernetes.default.svc"], ["127.0.0.1", "10.96.0.1"])
    names = _load(cert_path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "kubernetes.default.svc"]
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("10.96.0.1"),
    ]


def test_serving_certificate_passes_a_real_tls_handshake(pki: ClusterPKI) -> None:
    cert_path, key_path = pki.issue_serving_cert("api", ["localhost"], ["127.0.0.1"])
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_path, key_path)
    client_context = ssl.create_default_context(cafile=str(pki.ca_cert))
    server_socket, client_socket = socket.socketpair()
    with server_socket, client_socket:
        server = threading.Thread(target=_serve_one_handshake, args=(server_context, server_socket))
        server.start()
        with client_context.wrap_socket(client_socket, server_hostname="localhost") as tls:
            assert tls.recv(2) == b"ok"
        server.join(timeout=10)


def _serve_one_handshake(context: ssl.SSLContext, sock: socket.socket) -> None:
    with context.wrap_socket(sock, server_side=True) as tls:
        tls.sendall(b"ok")


def test_issuing_the_same_name_twice_never_overwrites(pki: ClusterPKI) -> None:
    first = pki.issue_client_cert("admin", ["system:masters"])
    second = pki.issue_client_cert("admin", ["system:masters"])
    assert first != second
    assert _load(first[0]).serial_number != _load(second[0]).serial_number


def test_service_account_key_is_rsa_and_private(pki: ClusterPKI) -> None:
    key = load_pem_private_key(pki.service_account_key.read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    assert key.key_size == 2048
    assert pki.service_account_key.stat().st_mode & 0o077 == 0
    assert b"BEGIN PUBLIC KEY" in pki.service_account_public_key.read_bytes()


@pytest.mark.parametrize(
    ("common_name", "stem"),
    [("system:node:a", "system-node-a"), ("kube-apiserver", "kube-apiserver"), (":::", "cert")],
)
def test_file_stem(common_name: str, stem: str) -> None:
    assert file_stem(common_name) == stem


@pytest.mark.parametrize(
    ("bind", "advertise", "extra", "expected_ips", "extra_dns"),
    [
        ("127.0.0.1", None, (), ["127.0.0.1", "10.96.0.1"], []),
        ("0.0.0.0", "10.88.0.1", ["10.88.0.1"], ["127.0.0.1", "10.96.0.1", "10.88.0.1"], []),  # noqa: S104
        (
            "192.0.2.2",
            None,
            ["host.example", "198.51.100.7"],
            ["127.0.0.1", "10.96.0.1", "192.0.2.2", "198.51.100.7"],
            ["host.example"],
        ),
    ],
)
def test_apiserver_certificate_names(
    bind: str, advertise: str | None, extra: list[str], expected_ips: list[str], extra_dns: list[str]
) -> None:
    dns_names, addresses = apiserver_subject_alternative_names(bind, advertise, extra)
    assert addresses == expected_ips
    assert dns_names[: len(APISERVER_DNS_NAMES)] == list(APISERVER_DNS_NAMES)
    assert dns_names[len(APISERVER_DNS_NAMES) :] == extra_dns


@pytest.mark.parametrize(
    ("bind", "url"),
    [
        ("0.0.0.0", "https://127.0.0.1:6443"),  # noqa: S104
        ("127.0.0.1", "https://127.0.0.1:6443"),
        ("::", "https://127.0.0.1:6443"),
        ("fd00::1", "https://[fd00::1]:6443"),
    ],
)
def test_client_url_for_bind_address(bind: str, url: str) -> None:
    assert https_url(host_for_clients(bind), 6443) == url
