"""The admission webhook's serving certificate: what the Secret holds, and its next step.

Pure functions of (Secret, the caBundle the API server trusts now, the time, a policy), called
by the webhook's certificate loop (reconciler.runtime.webhook) on every replica: the leader
writes the steps, every replica serves what the Secret holds. Certificates are made with the
project's one certificate code (reconciler.kaiwudb.certs); tests drive the steps with a fake
clock.

The Secret (type kubernetes.io/tls; cert-manager's key names, so either can fill it):
- `tls.crt`, `tls.key`: the serving certificate, issued by the CA in `ca.crt`;
- `ca.crt`, `ca.key`: that CA (only `ca.crt` when cert-manager issued the Secret);
- during a CA rotation, `next-ca.crt`, `next-ca.key`: the CA taking over, and after it,
  `previous-ca.crt`: the CA replaced, still trusted until the replicas serve the new one.
The API server must trust the CA of whatever certificate any replica serves, so the caBundle is
every CA the Secret names (`ca_bundle`), and a CA rotation goes in steps, each written only once
the one before is in place:
  1. the CA is within a third of its lifetime of expiry: a next CA is made
     (annotation `kaiwu.inspur.com/next-ca-since`); the caBundle gets it;
  2. the caBundle has held the next CA for `overlap`: it becomes the CA and issues a new serving
     certificate; the old CA stays as `previous-ca.crt` until `kaiwu.inspur.com/previous-ca-until`
     (now + overlap), while the replicas reload the Secret;
  3. after that, the previous CA is dropped from the Secret and the caBundle.
The serving certificate alone (same CA) is reissued once it is within a third of its lifetime of
expiry, or no longer matches the hosts; the caBundle does not change for that. A Secret that
cannot be used at all (absent, or its CA unreadable or expired) is replaced by a fresh CA and
certificate.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from reconciler.kaiwudb.certs.authority import new_ca
from reconciler.kaiwudb.certs.keys import (
    CertKey,
    CertSettings,
    covers_host,
    issued_by,
    load_cert_key,
)
from reconciler.kaiwudb.certs.leaves import issue_server

Obj = dict[str, Any]

TLS_CRT, TLS_KEY, CA_CRT, CA_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"
NEXT_CRT, NEXT_KEY, PREVIOUS_CRT = "next-ca.crt", "next-ca.key", "previous-ca.crt"
NEXT_SINCE = "kaiwu.inspur.com/next-ca-since"
PREVIOUS_UNTIL = "kaiwu.inspur.com/previous-ca-until"
CA_NAME = "kaiwu-reconciler webhook CA"


@dataclass(frozen=True)
class ServingPolicy:
    """How the webhook's certificates are made: the name and hosts (SANs) the API server dials,
    lifetimes, and how long old and new CA are trusted side by side."""

    common_name: str
    hosts: tuple[str, ...]
    ca_validity: timedelta
    cert_validity: timedelta
    overlap: timedelta
    key_size: int = 2048


@dataclass(frozen=True)
class ServingState:
    """What a webhook Secret holds, parsed (None: absent or unreadable)."""

    ca: CertKey | None = None
    ca_cert: x509.Certificate | None = None  # ca.crt alone (cert-manager gives no key)
    leaf: CertKey | None = None
    next_ca: CertKey | None = None
    previous_ca: x509.Certificate | None = None
    next_since: datetime | None = None
    previous_until: datetime | None = None


def _pem(secret: Obj | None, key: str) -> bytes | None:
    raw = ((secret or {}).get("data") or {}).get(key)
    if not raw:
        return None
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return None


def _cert(pem: bytes | None) -> x509.Certificate | None:
    if pem is None:
        return None
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None


def _pair(secret: Obj | None, crt: str, key: str) -> CertKey | None:
    cert, private = _pem(secret, crt), _pem(secret, key)
    return load_cert_key(cert, private) if cert and private else None


def _time(secret: Obj | None, annotation: str) -> datetime | None:
    text = (((secret or {}).get("metadata") or {}).get("annotations") or {}).get(annotation)
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def read_state(secret: Obj | None) -> ServingState:
    """Parse a webhook Secret (ours or cert-manager's)."""
    ca = _pair(secret, CA_CRT, CA_KEY)
    return ServingState(
        ca=ca, ca_cert=ca.cert if ca else _cert(_pem(secret, CA_CRT)),
        leaf=_pair(secret, TLS_CRT, TLS_KEY), next_ca=_pair(secret, NEXT_CRT, NEXT_KEY),
        previous_ca=_cert(_pem(secret, PREVIOUS_CRT)),
        next_since=_time(secret, NEXT_SINCE), previous_until=_time(secret, PREVIOUS_UNTIL))


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def secret_content(state: ServingState) -> tuple[dict[str, str], dict[str, str]]:
    """The Secret's data (base64) and annotations for a state."""
    raw: dict[str, bytes] = {}
    if state.ca is not None:
        raw[CA_CRT], raw[CA_KEY] = state.ca.cert_pem, state.ca.key_pem
    if state.leaf is not None:
        raw[TLS_CRT], raw[TLS_KEY] = state.leaf.cert_pem, state.leaf.key_pem
    if state.next_ca is not None:
        raw[NEXT_CRT], raw[NEXT_KEY] = state.next_ca.cert_pem, state.next_ca.key_pem
    if state.previous_ca is not None:
        raw[PREVIOUS_CRT] = _cert_pem(state.previous_ca)
    annotations = {}
    if state.next_ca is not None and state.next_since is not None:
        annotations[NEXT_SINCE] = state.next_since.isoformat()
    if state.previous_ca is not None and state.previous_until is not None:
        annotations[PREVIOUS_UNTIL] = state.previous_until.isoformat()
    return {k: base64.b64encode(v).decode() for k, v in sorted(raw.items())}, annotations


def ca_bundle(state: ServingState) -> bytes:
    """Every CA a replica may be serving a certificate of: the caBundle to register."""
    certs = [c for c in (state.ca_cert, state.next_ca.cert if state.next_ca else None,
                         state.previous_ca) if c is not None]
    seen: set[bytes] = set()
    out = b""
    for cert in certs:
        fingerprint = cert.fingerprint(hashes.SHA256())
        if fingerprint not in seen:
            seen.add(fingerprint)
            out += _cert_pem(cert)
    return out


def bundle_fingerprints(bundle: bytes) -> set[bytes]:
    """The SHA-256 fingerprints of the certificates in a PEM bundle (unreadable: none)."""
    try:
        return {c.fingerprint(hashes.SHA256()) for c in x509.load_pem_x509_certificates(bundle)}
    except ValueError:
        return set()


def _settings(policy: ServingPolicy, ca: CertKey | None, now: datetime) -> CertSettings:
    validity = policy.cert_validity
    if ca is not None:  # never outlive the issuing CA
        validity = min(validity, ca.cert.not_valid_after_utc - now)
    return CertSettings(key_size=policy.key_size, ca_validity=policy.ca_validity,
                        leaf_validity=validity, backdate=timedelta(minutes=5))


def _issue(ca: CertKey, now: datetime, policy: ServingPolicy) -> CertKey:
    return issue_server(ca, policy.common_name, policy.hosts, now, _settings(policy, ca, now))


def _leaf_fault(state: ServingState, now: datetime, policy: ServingPolicy) -> str:
    """Why the serving certificate must be reissued at once ("" when it is usable)."""
    leaf, ca = state.leaf, state.ca
    assert ca is not None
    if leaf is None:
        return "no serving certificate"
    if not issued_by(leaf.cert, ca.cert):
        return "the serving certificate is not issued by the CA"
    if leaf.cert.not_valid_after_utc <= now:
        return "the serving certificate expired"
    missing = [h for h in policy.hosts if not covers_host(leaf.cert, h)]
    if missing:
        return f"the serving certificate does not cover {', '.join(missing)}"
    return ""


def next_step(state: ServingState, live_bundle: bytes, now: datetime,
              policy: ServingPolicy) -> tuple[ServingState, str] | None:
    """The next state of a reconciler-managed Secret and why, or None when nothing is due.
    One step at a time: the caller writes it and calls again on its next tick."""
    ca = state.ca
    if ca is None or ca.cert.not_valid_after_utc <= now:
        fresh = new_ca(CA_NAME, now, _settings(policy, None, now))
        return (ServingState(ca=fresh, ca_cert=fresh.cert, leaf=_issue(fresh, now, policy)),
                "created a CA and serving certificate" if ca is None
                else "the CA expired: created a new CA and serving certificate")
    if state.next_ca is not None:
        since = state.next_since or now
        trusted = state.next_ca.cert.fingerprint(hashes.SHA256()) in bundle_fingerprints(
            live_bundle)
        if trusted and now >= since + policy.overlap:
            promoted = state.next_ca
            return (replace(state, ca=promoted, ca_cert=promoted.cert,
                            leaf=_issue(promoted, now, policy), next_ca=None, next_since=None,
                            previous_ca=ca.cert, previous_until=now + policy.overlap),
                    "the next CA took over and issued a new serving certificate")
    if state.previous_ca is not None and (state.previous_until is None
                                          or now >= state.previous_until):
        return (replace(state, previous_ca=None, previous_until=None),
                "dropped the previous CA (every replica serves the new one)")
    if state.next_ca is None and ca.cert.not_valid_after_utc - now < policy.ca_validity / 3:
        upcoming = new_ca(CA_NAME, now, _settings(policy, None, now))
        return (replace(state, next_ca=upcoming, next_since=now),
                "the CA expires soon: made the next CA (trusted before it is used)")
    fault = _leaf_fault(state, now, policy)
    if fault:
        return replace(state, leaf=_issue(ca, now, policy)), f"{fault}: issued a new one"
    assert state.leaf is not None
    remaining = state.leaf.cert.not_valid_after_utc - now
    # Also while a next CA waits to take over (the current CA is trusted throughout); not when
    # the certificate already ends with its CA, which the rotation replaces first.
    if remaining < policy.cert_validity / 3 and remaining < ca.cert.not_valid_after_utc - now:
        return (replace(state, leaf=_issue(ca, now, policy)),
                "the serving certificate expires soon: issued a new one")
    return None


def serving_pair(secret: Obj | None) -> tuple[bytes, bytes] | None:
    """(tls.crt, tls.key) PEM of a Secret when both are present and belong together (tls.crt
    may carry a chain: its first certificate is the one checked)."""
    cert, key = _pem(secret, TLS_CRT), _pem(secret, TLS_KEY)
    if not cert or not key or load_cert_key(cert, key) is None:
        return None
    return cert, key
