"""A throw-away public key infrastructure for the test control plane.

Owns: one cluster CA, client and serving certificates signed by it, and the RSA key pair that signs
ServiceAccount tokens, all written as PEM files under one directory. Certificate building is pure
(keys, names and the time are arguments); `ClusterPKI` only adds key generation and files.
Never: starts processes, talks to a cluster, or writes outside its directory.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = datetime.timedelta(days=3650)
LEAF_VALIDITY = datetime.timedelta(days=365)
# Certificates are back-dated a little so that a clock skew between components does not matter.
CLOCK_SKEW = datetime.timedelta(minutes=5)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class CertificateRequest:
    """What a leaf certificate says about its subject."""

    common_name: str
    organizations: Sequence[str] = ()
    dns_names: Sequence[str] = ()
    ip_addresses: Sequence[str] = ()
    client: bool = True
    server: bool = False


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def build_ca_certificate(key: PrivateKey, common_name: str, now: datetime.datetime) -> x509.Certificate:
    """A self-signed CA certificate for `key`, valid from `now` (minus skew) for ten years."""
    name = _name(common_name)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _subject_alternative_names(request: CertificateRequest) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(dns) for dns in dict.fromkeys(request.dns_names)]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys(request.ip_addresses)]
    return names


def _extended_key_usages(request: CertificateRequest) -> list[x509.ObjectIdentifier]:
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if request.client else []
    return usages + ([ExtendedKeyUsageOID.SERVER_AUTH] if request.server else [])


def build_leaf_certificate(
    request: CertificateRequest,
    public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey,
    ca_certificate: x509.Certificate,
    ca_key: PrivateKey,
    now: datetime.datetime,
) -> x509.Certificate:
    """A certificate for `request` signed by the CA, valid from `now` (minus skew) for a year."""
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(request.common_name, request.organizations))
        .issuer_name(ca_certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + LEAF_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(_extended_key_usages(request)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    alternative_names = _subject_alternative_names(request)
    if alternative_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def file_stem(common_name: str) -> str:
    """A file-name-safe stem for a certificate's common name (`system:node:a` -> `system-node-a`)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", common_name).strip("-.") or "cert"


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class ClusterPKI:
    """A cluster CA plus the service-account signing keys, stored under `directory`.

    `ClusterPKI.create(directory)` makes new keys; the instance then issues certificates on demand.
    Leaf keys are ECDSA P-256 (fast to make, accepted by every component); the service-account key
    is RSA 2048 as Kubernetes documents it.
    """

    def __init__(self, directory: Path, ca_key: PrivateKey, ca_certificate: x509.Certificate) -> None:
        self.directory = directory
        self._ca_key = ca_key
        self._ca_certificate = ca_certificate

    @classmethod
    def create(cls, directory: Path, *, now: datetime.datetime | None = None) -> ClusterPKI:
        """Generate the CA and the service-account key pair under `directory` (created if missing)."""
        directory.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_certificate = build_ca_certificate(ca_key, "headrace-testbed-ca", now or _utc_now())
        pki = cls(directory, ca_key, ca_certificate)
        _write_private(pki.ca_key, _key_pem(ca_key))
        pki.ca_cert.write_bytes(ca_certificate.public_bytes(serialization.Encoding.PEM))
        service_account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_private(pki.service_account_key, _key_pem(service_account_key))
        pki.service_account_public_key.write_bytes(
            service_account_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return pki

    @property
    def ca_cert(self) -> Path:
        """PEM certificate of the cluster CA (trust anchor of every client and server here)."""
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        """PEM private key of the cluster CA (also the controller-manager's CSR signing key)."""
        return self.directory / "ca.key"

    @property
    def service_account_key(self) -> Path:
        """PEM RSA private key that signs ServiceAccount tokens."""
        return self.directory / "sa.key"

    @property
    def service_account_public_key(self) -> Path:
        """PEM RSA public key that verifies ServiceAccount tokens."""
        return self.directory / "sa.pub"

    def issue_client_cert(self, common_name: str, organizations: Sequence[str] = ()) -> tuple[Path, Path]:
        """A client certificate: the user is `common_name`, its groups are `organizations`."""
        return self.issue(CertificateRequest(common_name, organizations=tuple(organizations)))

    def issue_serving_cert(
        self, common_name: str, dns_names: Sequence[str] = (), ip_addresses: Sequence[str] = ()
    ) -> tuple[Path, Path]:
        """A TLS server certificate valid for the given DNS names and IP addresses."""
        request = CertificateRequest(
            common_name, dns_names=tuple(dns_names), ip_addresses=tuple(ip_addresses), client=False, server=True
        )
        return self.issue(request)

    def issue(self, request: CertificateRequest, *, now: datetime.datetime | None = None) -> tuple[Path, Path]:
        """Sign `request` with a fresh key; return the (certificate, key) paths, never overwriting."""
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = build_leaf_certificate(
            request, key.public_key(), self._ca_certificate, self._ca_key, now or _utc_now()
        )
        cert_path, key_path = self._unused_paths(file_stem(request.common_name))
        _write_private(key_path, _key_pem(key))
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return cert_path, key_path

    def _unused_paths(self, stem: str) -> tuple[Path, Path]:
        candidate, counter = stem, 1
        while (self.directory / f"{candidate}.crt").exists():
            counter += 1
            candidate = f"{stem}-{counter}"
        return self.directory / f"{candidate}.crt", self.directory / f"{candidate}.key"
