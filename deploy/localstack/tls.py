"""A certificate authority of the local stack's own, and server certificates it signs,
so Postgres (and later Kafka) speak TLS that clients verify in full (``sslmode=
verify-full``: the CA, and the host name or address the client dialled).

The files live in the stack's home and are made once; a server certificate names
``localhost`` and ``127.0.0.1``, the only addresses the local stack listens on.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from .private_files import write_private

VALID_FOR = dt.timedelta(days=3650)


@dataclass(frozen=True)
class ServerCertificate:
    """PEM files: the CA clients trust, and the server's certificate and key."""

    ca: Path
    certificate: Path
    key: Path


def server_certificate(
    folder: Path, name: str, hosts: tuple[str, ...] = ("localhost",)
) -> ServerCertificate:
    """The CA in ``folder`` (made if missing) and a certificate for server ``name``
    signed by it (made if missing), valid for the DNS names ``hosts`` and 127.0.0.1;
    keys are readable by their owner only."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _authority(folder)
    made = ServerCertificate(
        ca=folder / "ca.pem", certificate=folder / f"{name}.crt", key=folder / f"{name}.key"
    )
    if made.certificate.exists() and made.key.exists():
        return made
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"firn {name}")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    *(x509.DNSName(host) for host in hosts),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(made.key, key)
    made.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return made


def _authority(folder: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = folder / "ca.pem", folder / "ca.key"
    if cert_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), key
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "firn local stack CA")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return certificate, key


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_private(path, pem)
