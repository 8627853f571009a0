"""Mask secret values so that no drift output (hash, diff, log line, Event) carries them.

The drift normaliser (reconciler.normalise) masks while it projects, so the projection, its hash
and every report built from it are safe by construction. Anyone else who must show a value that
may be secret can call :func:`mask` with the same key.

A mask is ``***`` plus the first 16 hex digits of an HMAC-SHA256 of the value: equal values mask
equally, so a reviewer still sees "changed" versus "unchanged", but without the key a mask cannot
be used to test guesses of a low-entropy secret (a plain hash could).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re

MASK_PREFIX = "***"
_MASK_HEX_DIGITS = 16
# `--name=value` or `-name=value`: the value of a flag whose name looks secret.
_FLAG = re.compile(r"^(?P<flag>--?[A-Za-z0-9_.-]+=)(?P<value>.*)$", re.DOTALL)


def mask(value: bytes | str, key: bytes) -> str:
    """The mask of ``value`` under ``key``."""
    data = value.encode() if isinstance(value, str) else value
    digest = hmac.new(key, data, hashlib.sha256).hexdigest()
    return MASK_PREFIX + digest[:_MASK_HEX_DIGITS]


def mask_base64(value: str, key: bytes) -> str:
    """The mask of a Secret ``data`` value: of its decoded bytes, so encodings do not matter."""
    try:
        return mask(base64.b64decode(value, validate=True), key)
    except (binascii.Error, ValueError):
        # Not valid base64 (a malformed desired object): mask the text itself.
        return mask(value, key)


def is_secret_name(name: str, pattern: re.Pattern[str]) -> bool:
    """Whether an env var or flag name looks like it holds a secret (PASSWORD, TOKEN...)."""
    return pattern.search(name) is not None


def mask_flag(argument: str, pattern: re.Pattern[str], key: bytes) -> str:
    """``--password=x`` becomes ``--password=***<mask>``; other arguments are unchanged."""
    match = _FLAG.match(argument)
    if match is None or not is_secret_name(match["flag"], pattern):
        return argument
    return match["flag"] + mask(match["value"], key)
