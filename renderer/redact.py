"""Masking of secret values in everything we print: diffs, drift reports, logs, Events (Secret
data, env values, annotations, and flag values in a command line, `--flag=value` or `--flag`
then `value`, whose names look secret).

Called by `renderer.diff` (rendered objects), by the drift normaliser (reconciler.drift.normalise),
which masks while it projects so hashes and reports never carry a value, and by
reconciler.kaiwudb.certs for messages about Secrets.

A mask is `***` plus the first 16 hex digits of an HMAC-SHA256 of the value: equal values mask
equally under one key, so a reader still sees "changed" versus "unchanged", but without the key
a mask cannot be used to test guesses of a low-entropy secret (a plain hash could). The default
key is random per process.
"""

from __future__ import annotations

import base64
import binascii
import copy
import os
import re
from typing import Any

MASK_PREFIX = "***"
_MASK_HEX_DIGITS = 16
PROCESS_KEY = os.urandom(32)  # what secrets.token_bytes(32) returns, without its imports
SECRET_NAMES = r"(?i)(passw(or)?d|secret|token|api[_-]?key|private[_-]?key|credential)"
_SECRET_NAME = re.compile(SECRET_NAMES)
# `--name=value` or `-name=value`: the value of a flag whose name looks secret.
_FLAG = re.compile(r"^(?P<flag>--?[A-Za-z0-9_.-]+=)(?P<value>.*)$", re.DOTALL)
# `--name` alone: its value is the next argument (`--api-token xyz`, as command-line parsers
# such as kwbase's accept it).
_BARE_FLAG = re.compile(r"^--?[A-Za-z0-9_.-]+$")


def mask(value: bytes | str, key: bytes = PROCESS_KEY) -> str:
    """The mask of `value` under `key`."""
    # Imported when a value is masked: a `kaiwu diff` whose changes hold no secret loads neither
    # (about 5 ms of its start-up with `secrets`; bench/diff_process.py).
    import hashlib
    import hmac

    data = value.encode() if isinstance(value, str) else value
    digest = hmac.new(key, data, hashlib.sha256).hexdigest()
    return MASK_PREFIX + digest[:_MASK_HEX_DIGITS]


def mask_base64(value: str, key: bytes = PROCESS_KEY) -> str:
    """The mask of a Secret `data` value: of its decoded bytes, so encodings do not matter."""
    try:
        return mask(base64.b64decode(value, validate=True), key)
    except (binascii.Error, ValueError):
        # Not valid base64 (a malformed desired object): mask the text itself.
        return mask(value, key)


def is_secret_name(name: str, pattern: re.Pattern[str] = _SECRET_NAME) -> bool:
    """Whether an env var or flag name looks like it holds a secret (PASSWORD, TOKEN...)."""
    return pattern.search(name) is not None


def mask_flag(argument: str, pattern: re.Pattern[str] = _SECRET_NAME,
              key: bytes = PROCESS_KEY) -> str:
    """`--password=x` becomes `--password=***<mask>`; other arguments are unchanged."""
    match = _FLAG.match(argument)
    if match is None or not is_secret_name(match["flag"], pattern):
        return argument
    return match["flag"] + mask(match["value"], key)


def is_secret_flag(argument: Any, pattern: re.Pattern[str] = _SECRET_NAME) -> bool:
    """Whether an argument is a bare flag whose name looks secret: the next one is its value."""
    return isinstance(argument, str) and _BARE_FLAG.match(argument) is not None and \
        is_secret_name(argument, pattern)


def mask_arguments(arguments: list[Any], pattern: re.Pattern[str] = _SECRET_NAME,
                   key: bytes = PROCESS_KEY) -> list[Any]:
    """A command line with secret flag values masked: `--password=x`, and the argument after
    a bare `--password`."""
    return [arg if not isinstance(arg, str) else
            mask(arg, key) if index and is_secret_flag(arguments[index - 1], pattern) else
            mask_flag(arg, pattern, key) for index, arg in enumerate(arguments)]


def redact(obj: dict[str, Any], key: bytes = PROCESS_KEY) -> dict[str, Any]:
    """A copy of one Kubernetes object with secret values masked: Secret data and stringData,
    env values and annotations whose names look secret, and the values of secret-looking
    flags in commands and arguments."""
    result = copy.deepcopy(obj)
    if result.get("kind") == "Secret":
        if isinstance(result.get("data"), dict):
            result["data"] = {name: mask_base64(str(value), key)
                              for name, value in result["data"].items()}
        if isinstance(result.get("stringData"), dict):
            result["stringData"] = {name: mask(str(value), key)
                                    for name, value in result["stringData"].items()}
    _redact_containers(result, key)
    return result


def _redact_containers(node: Any, mask_key: bytes) -> None:
    if isinstance(node, dict):
        for name, value in node.items():
            if name == "env" and isinstance(value, list):
                for item in value:
                    if (isinstance(item, dict) and "value" in item
                            and is_secret_name(str(item.get("name", "")))):
                        item["value"] = mask(str(item["value"]), mask_key)
            elif name == "annotations" and isinstance(value, dict):
                node[name] = {name_: mask(str(text), mask_key) if is_secret_name(str(name_))
                              else text for name_, text in value.items()}
            elif name in ("command", "args") and isinstance(value, list):
                node[name] = mask_arguments(value, key=mask_key)
            else:
                _redact_containers(value, mask_key)
    elif isinstance(node, list):
        for item in node:
            _redact_containers(item, mask_key)
