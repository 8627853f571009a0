"""Masking of secret values in everything we print: diffs, drift reports, logs, Events.

Called by `renderer.diff` and by the reconciler's reports. Equal values mask equally (a short
keyed hash), so a reader still sees whether a secret changed, never what it is.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|PRIVATE|API_?KEY|_KEY$)",
                         re.IGNORECASE)
_SALT = b"kaiwu-redact-v1"


def mask(value: Any) -> str:
    """A stable stand-in for a secret value: `***` and 8 hex digits of a salted hash."""
    digest = hashlib.sha256(_SALT + repr(value).encode()).hexdigest()[:8]
    return f"***{digest}"


def redact(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of one Kubernetes object with secret values masked: Secret data and stringData,
    and env values whose names say they are secret (PASSWORD, TOKEN, ..._KEY)."""
    result = copy.deepcopy(obj)
    if result.get("kind") == "Secret":
        for field in ("data", "stringData"):
            if isinstance(result.get(field), dict):
                result[field] = {key: mask(value) for key, value in result[field].items()}
    _redact_env(result)
    return result


def _redact_env(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                for item in value:
                    if (isinstance(item, dict) and "value" in item
                            and SECRET_NAME.search(str(item.get("name", "")))):
                        item["value"] = mask(item["value"])
            else:
                _redact_env(value)
    elif isinstance(node, list):
        for item in node:
            _redact_env(item)
