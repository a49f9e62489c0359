"""The PKI of a throwaway Kubernetes control plane, made with `cryptography`.

Pure functions return PEM bytes; `write_cluster_pki` is the only one that touches the file system.
Keys are ECDSA P-256 (fast to generate, accepted everywhere Kubernetes takes a key, including the
service-account signing key, which then signs ES256 tokens); a serving certificate may have an RSA 2048 key
instead, cert-manager's default.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)
# The first address of the service CIDR the control plane uses (the `kubernetes` Service's ClusterIP).
APISERVER_SANS_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_SANS_IP = ("127.0.0.1", "10.0.0.1")


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key, PEM encoded."""

    cert_pem: bytes
    key_pem: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _new_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _key_pem(key: CertificateIssuerPrivateKeyTypes) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)  # tolerate clock skew


def generate_ca(common_name: str) -> CertKey:
    """A self-signed CA."""
    key = _new_key()
    name = _name(common_name)
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
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
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _issue(
    ca: CertKey,
    subject: x509.Name,
    *,
    usages: Sequence[x509.ObjectIdentifier],
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    rsa_key: bool = False,
) -> CertKey:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("CA key must be an EC key")
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = _new_rsa_key() if rsa_key else _new_key()
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
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
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if dns_names or ip_addresses:
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def generate_serving_cert(
    ca: CertKey, common_name: str, *, dns_names: Sequence[str] = (), ip_addresses: Sequence[str] = (),
    rsa_key: bool = False,
) -> CertKey:
    """A TLS server certificate signed by `ca` for the given SANs; `rsa_key`: an RSA 2048 key, else P-256."""
    return _issue(
        ca,
        _name(common_name),
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        rsa_key=rsa_key,
    )


def generate_client_cert(ca: CertKey, common_name: str, organizations: Sequence[str] = ()) -> CertKey:
    """A TLS client certificate: Kubernetes reads the user from CN and the groups from O."""
    return _issue(ca, _name(common_name, organizations), usages=[ExtendedKeyUsageOID.CLIENT_AUTH])


def generate_signing_key_pair() -> tuple[bytes, bytes]:
    """(private key PEM, public key PEM) for signing service-account tokens."""
    key = _new_key()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _key_pem(key), public


@dataclass(frozen=True)
class ClusterPKI:
    """Everything a control plane needs, in memory."""

    ca: CertKey
    apiserver: CertKey
    admin: CertKey  # system:masters
    controller_manager: CertKey  # system:kube-controller-manager
    scheduler: CertKey  # system:kube-scheduler
    kwok: CertKey  # system:masters (kwok writes node and pod status, leases, events)
    front_proxy_ca: CertKey
    front_proxy_client: CertKey
    service_account_key: bytes
    service_account_pub: bytes


def generate_cluster_pki() -> ClusterPKI:
    ca = generate_ca("ensemble-test-ca")
    front_proxy_ca = generate_ca("ensemble-test-front-proxy-ca")
    sa_key, sa_pub = generate_signing_key_pair()
    return ClusterPKI(
        ca=ca,
        apiserver=generate_serving_cert(
            ca, "kube-apiserver", dns_names=APISERVER_SANS_DNS, ip_addresses=APISERVER_SANS_IP
        ),
        admin=generate_client_cert(ca, "kubernetes-admin", ["system:masters"]),
        controller_manager=generate_client_cert(ca, "system:kube-controller-manager"),
        scheduler=generate_client_cert(ca, "system:kube-scheduler"),
        kwok=generate_client_cert(ca, "kwok", ["system:masters"]),
        front_proxy_ca=front_proxy_ca,
        front_proxy_client=generate_client_cert(front_proxy_ca, "front-proxy-client"),
        service_account_key=sa_key,
        service_account_pub=sa_pub,
    )


@dataclass(frozen=True)
class CertKeyFiles:
    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPKIFiles:
    """Where `write_cluster_pki` put each file."""

    ca: CertKeyFiles
    apiserver: CertKeyFiles
    admin: CertKeyFiles
    controller_manager: CertKeyFiles
    scheduler: CertKeyFiles
    kwok: CertKeyFiles
    front_proxy_ca: CertKeyFiles
    front_proxy_client: CertKeyFiles
    service_account_key: Path
    service_account_pub: Path


def _write(path: Path, data: bytes, mode: int) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def _write_pair(directory: Path, stem: str, pair: CertKey) -> CertKeyFiles:
    return CertKeyFiles(
        cert=_write(directory / f"{stem}.crt", pair.cert_pem, 0o644),
        key=_write(directory / f"{stem}.key", pair.key_pem, 0o600),
    )


def write_cluster_pki(pki: ClusterPKI, directory: Path) -> ClusterPKIFiles:
    directory.mkdir(parents=True, exist_ok=True)
    return ClusterPKIFiles(
        ca=_write_pair(directory, "ca", pki.ca),
        apiserver=_write_pair(directory, "apiserver", pki.apiserver),
        admin=_write_pair(directory, "admin", pki.admin),
        controller_manager=_write_pair(directory, "controller-manager", pki.controller_manager),
        scheduler=_write_pair(directory, "scheduler", pki.scheduler),
        kwok=_write_pair(directory, "kwok", pki.kwok),
        front_proxy_ca=_write_pair(directory, "front-proxy-ca", pki.front_proxy_ca),
        front_proxy_client=_write_pair(directory, "front-proxy-client", pki.front_proxy_client),
        service_account_key=_write(directory / "sa.key", pki.service_account_key, 0o600),
        service_account_pub=_write(directory / "sa.pub", pki.service_account_pub, 0o644),
    )
