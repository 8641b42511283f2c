"""The control endpoint's per-app TLS certificate (docs/security.md, "The control endpoint is HTTPS").

Owns: the self-signed certificate of an app's control endpoint, built from a private key and a time the
caller makes (ECDSA P-256; its one name is `names.control_server_name`; valid for `VALIDITY`), its PEM
encoding as the control Secret stores it, and the mount of the certificate and key in the driver only.
Never: I/O, or making the key or reading the clock (the edge does, as it makes the token).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from headrace.api import names
from headrace.api import runtime_contract as contract

CERT_KEY = contract.CONTROL_TLS_CERT_FILE  # keys of the app's control Secret, and the files' names in the driver
KEY_KEY = contract.CONTROL_TLS_KEY_FILE
VOLUME = names.CONTROL_TLS_VOLUME
MOUNT_DIR = "/var/run/headrace/control-tls"
VALIDITY = timedelta(days=3650)  # no rotation: a streaming app runs for years; its Secret lives as long as it
BACKDATE = timedelta(hours=1)  # clocks of the operator's node and the driver's may differ


@dataclass(frozen=True)
class ControlCertificate:
    """An app's control certificate and its private key, both PEM."""

    certificate: str
    key: str

    def secret_values(self) -> dict[str, str]:
        """The control Secret's keys that hold them."""
        return {CERT_KEY: self.certificate, KEY_KEY: self.key}


def control_certificate(app: str, namespace: str, key: ec.EllipticCurvePrivateKey, now: datetime) -> ControlCertificate:
    """The self-signed certificate of `app`'s control endpoint for `key`: a server certificate (not a CA) whose
    one name is `names.control_server_name`, valid from shortly before `now` for `VALIDITY`. The operator trusts
    exactly this certificate for this app (it is the only trust anchor of its connection), so another app's
    certificate, though made the same way, is refused."""
    server_name = names.control_server_name(app, namespace)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, server_name[:64])])
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(server_name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return ControlCertificate(
        certificate=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        key=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
    )


def volume(app: str) -> dict[str, Any]:
    """The certificate and key from the app's Secret (only those two keys), for the driver container only: executors
    run the app's code too but never serve the endpoint. The files are root-owned without an fsGroup, so the
    image's user reads them as others (0444, as the Spark secret); no other user runs in the container."""
    return {
        "name": VOLUME,
        "secret": {
            "secretName": names.control_secret(app),
            "items": [{"key": CERT_KEY, "path": CERT_KEY}, {"key": KEY_KEY, "path": KEY_KEY}],
            "defaultMode": 0o444,
        },
    }


def volume_mount() -> dict[str, Any]:
    """The mount of `volume` in the driver container (read-only)."""
    return {"name": VOLUME, "mountPath": MOUNT_DIR, "readOnly": True}
