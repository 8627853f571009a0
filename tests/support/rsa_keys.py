"""RSA keys made once per test session and handed out again to later tests.

Issuing certificates (reconciler.kaiwudb.certs, the webhook's own certificates) generates a
2048-bit RSA key per certificate, about 40 ms each on the shared machine: most of the time of
the certificate stories, and of every mutant of reconciler/kaiwudb/certs/ they run against.
The `shared_rsa_keys` fixture (autouse in tests/unit/conftest.py) puts a pool in front of
`cryptography`'s `rsa.generate_private_key`: the n-th key a test asks for with given parameters
is the n-th key of the pool for those parameters, made by the real function the first time any
test asks for it. Within a test every key is as new and as different from the others as without
the pool (a reissued certificate still gets a key unlike the old one); only separate tests see
the same keys. The arguments still reach the real function (a wrong key size or exponent fails
or shows as before), and the pool is only used inside tests/unit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

_generate = rsa.generate_private_key


class KeyPool:
    """Keys by (public_exponent, key_size), handed out in order from the start of each test."""

    def __init__(self) -> None:
        self._keys: dict[tuple[Any, Any], list[rsa.RSAPrivateKey]] = {}
        self._drawn: dict[tuple[Any, Any], int] = {}
        self._lock = threading.Lock()

    def restart(self) -> None:
        """A new test: hand out the pool's keys from its first again."""
        with self._lock:
            self._drawn.clear()

    def generate_private_key(self, public_exponent: int, key_size: int,
                             backend: Any = None) -> rsa.RSAPrivateKey:
        params = (public_exponent, key_size)
        with self._lock:
            keys = self._keys.setdefault(params, [])
            index = self._drawn.get(params, 0)
            if index == len(keys):
                keys.append(_generate(public_exponent=public_exponent, key_size=key_size))
            self._drawn[params] = index + 1
            return keys[index]


POOL = KeyPool()


@pytest.fixture(autouse=True)
def shared_rsa_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[KeyPool]:
    """RSA key generation served from the session's pool (see the module docstring)."""
    POOL.restart()
    monkeypatch.setattr(rsa, "generate_private_key", POOL.generate_private_key)
    yield POOL
