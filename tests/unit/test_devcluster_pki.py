"""devcluster.pki: the certificates the control plane and clients rely on (no cluster needed)."""
from __future__ import annotations

import ipaddress

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devcluster.pki import ensure_pki


def load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_apiserver_cert_names_and_chain(tmp_path):
    pki = ensure_pki(tmp_path)
    ca, cert = load(pki.ca_crt), load(pki.apiserver_crt)
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) >= {
        "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local"}
    assert {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.0.0.1")} <= set(
        san.get_values_for_type(x509.IPAddress))
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku


def test_admin_is_system_masters_client(tmp_path):
    pki = ensure_pki(tmp_path)
    cert = load(pki.admin_crt)
    cert.verify_directly_issued_by(load(pki.ca_crt))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:masters"]
    assert ExtendedKeyUsageOID.CLIENT_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value


def test_idempotent_and_private_keys_protected(tmp_path):
    pki = ensure_pki(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    ensure_pki(tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    for key in (pki.ca_key, pki.admin_key, pki.sa_key, pki.apiserver_key, pki.kubelet_key, pki.webhook_key):
        assert key.stat().st_mode & 0o077 == 0, key


def test_new_ca_reissues_leaves(tmp_path):
    pki = ensure_pki(tmp_path)
    pki.ca_key.unlink()
    ensure_pki(tmp_path)
    load(pki.admin_crt).verify_directly_issued_by(load(pki.ca_crt))
    load(pki.kubelet_crt).verify_directly_issued_by(load(pki.ca_crt))
