"""The devcluster's PKI, generated with the `cryptography` package.

One CA signs everything (the same shape kwok and envtest use):

| file                          | used by                                                          |
|-------------------------------|------------------------------------------------------------------|
| ca.crt / ca.key               | apiserver --client-ca-file, the kubeconfig's CA, KCM --root-ca-file |
| apiserver.crt / apiserver.key | apiserver --tls-cert-file / --tls-private-key-file               |
| admin.crt / admin.key         | CN=admin O=system:masters: the single identity of KCM, scheduler, kubelets, tests |
| sa.key / sa.pub               | ServiceAccount token signing (apiserver) and KCM token controller |
| kubelet.crt / kubelet.key     | each kubelet's HTTPS (logs, exec). Not verified by the apiserver because no --kubelet-certificate-authority is set, but issued by our CA anyway |

Generation is idempotent: existing files are kept, so restarting the cluster does not invalidate
kubeconfigs that tests or the operator already loaded. `ensure_pki()` is the only entry point.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: DNS names and IPs the apiserver answers to. 10.0.0.1 is the first address of
#: --service-cluster-ip-range=10.0.0.0/24 (the `kubernetes` Service's ClusterIP).
APISERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.0.0.1", "::1")

VALIDITY = _dt.timedelta(days=3650)


@dataclass(frozen=True)
class Pki:
    """Paths of every PKI file (all absolute)."""

    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_crt(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_crt(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    @property
    def kubelet_crt(self) -> Path:
        return self.dir / "kubelet.crt"

    @property
    def kubelet_key(self) -> Path:
        return self.dir / "kubelet.key"

    @property
    def webhook_dir(self) -> Path:
        """Kueue's webhook serving certificate, named as controller-runtime looks for it."""
        return self.dir / "kueue-webhook"

    @property
    def webhook_crt(self) -> Path:
        return self.webhook_dir / "tls.crt"

    @property
    def webhook_key(self) -> Path:
        return self.webhook_dir / "tls.key"


def _write(path: Path, data: bytes, private: bool = False) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o600 if private else 0o644)
    os.replace(tmp, path)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _new_key():
    # P-256: fast to generate (RSA 2048 takes ~100 ms each on a small machine) and accepted by
    # every Go TLS stack involved.
    return ec.generate_private_key(ec.SECP256R1())


def _issue(
    ca_key,
    ca_cert: x509.Certificate,
    subject: x509.Name,
    key,
    *,
    server: bool,
    client: bool,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> x509.Certificate:
    now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=5)
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
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
                digital_signature=True, key_encipherment=True, content_commitment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _new_ca() -> tuple[object, x509.Certificate]:
    key = _new_key()
    now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=5)
    name = _name("devcluster-ca")
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
                digital_signature=True, key_encipherment=False, content_commitment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _has_ips(crt: Path, ips: tuple[str, ...]) -> bool:
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    try:
        have = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                   .get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        have = set()
    return {ipaddress.ip_address(i) for i in ips} <= have


def ensure_pki(directory: Path, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Create any missing PKI file under `directory`; return the paths. `extra_ips`: more IP
    SANs for the apiserver (the cluster's own addresses); its cert is reissued when one is missing.

    If the CA itself is missing, every leaf is regenerated (old leaves would not chain to it).
    """
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory.resolve())

    if pki.ca_crt.exists() and pki.ca_key.exists():
        ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes())
        fresh_ca = False
    else:
        ca_key, ca_cert = _new_ca()
        _write(pki.ca_key, _key_pem(ca_key), private=True)
        _write(pki.ca_crt, ca_cert.public_bytes(serialization.Encoding.PEM))
        fresh_ca = True

    leaves = [
        # (cert path, key path, subject, server, client, dns, ips)
        (pki.apiserver_crt, pki.apiserver_key, _name("kube-apiserver"), True, False,
         APISERVER_DNS, APISERVER_IPS + tuple(i for i in extra_ips if i not in APISERVER_IPS)),
        (pki.admin_crt, pki.admin_key, _name("admin", ("system:masters",)), False, True, (), ()),
        # Kubelets serve their API (logs, exec) with this; CN/O follow the kubelet convention so a
        # later --kubelet-certificate-authority with node-name validation would still fit
        # one node ("devnode"); the apiserver does not verify it today (it is given no
        # --kubelet-certificate-authority).
        (pki.kubelet_crt, pki.kubelet_key, _name("system:node:devnode", ("system:nodes",)),
         True, False, ("localhost",), ("127.0.0.1",)),
        # Kueue's webhooks, which the apiserver calls at 127.0.0.1 (devcluster/kueue.py)
        (pki.webhook_crt, pki.webhook_key, _name("kueue-webhook"), True, False, ("localhost",), ("127.0.0.1",)),
    ]
    pki.webhook_dir.mkdir(exist_ok=True)
    for crt, key_path, subject, server, client, dns, ips in leaves:
        if not fresh_ca and crt.exists() and key_path.exists() and _has_ips(crt, ips):
            continue
        key = _new_key()
        cert = _issue(ca_key, ca_cert, subject, key, server=server, client=client, dns=dns, ips=ips)
        _write(key_path, _key_pem(key), private=True)
        _write(crt, cert.public_bytes(serialization.Encoding.PEM))

    # ServiceAccount signing key: RSA 2048, the algorithm every token consumer supports (RS256).
    if not (pki.sa_key.exists() and pki.sa_pub.exists()):
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write(
            pki.sa_key,
            sa.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            ),
            private=True,
        )
        _write(
            pki.sa_pub,
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
    return pki
