"""Kubernetes' rules for what a KaiwuCluster names: its own name and namespace, label and
annotation keys and values (and the annotations' total size), the objects its spec refers to
(Secrets, classes, namespaces), and strings that are not text.

Called by renderer.semantics (check, check_metadata, check_text), and for the name patterns by
renderer.companions and the tests of hostile limits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from renderer.semantics.violation import Path, Violation

SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/managed-by", "app.kubernetes.io/component")
# StatefulSet pods get a controller-revision-hash label "<name>-<10 chars>" (63 max) and the
# client Service is "<name>-public": 40 leaves room for both and for "data-<name>-<ordinal>".
MAX_NAME_LENGTH = 40
# Kubernetes' limits (apimachinery validation): a namespace is a DNS-1123 label; the annotations
# of one object total at most 256 KiB (keys and values, in bytes). The operator adds a few of its
# own (the certificates' hash on the pod template): the user's share leaves room for them.
MAX_NAMESPACE_LENGTH = 63
MAX_ANNOTATION_BYTES = 256 * 1024
OPERATOR_ANNOTATION_BYTES = 1024
# `\Z`, not `$`: Python's `$` also matches before a final newline, so "dev\n" would pass.
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS_1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
# A lone UTF-16 surrogate, which a "\\ud800" escape in YAML or JSON makes (not text).
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(value: Any, path: Path = ()) -> list[Violation]:
    """Strings that are not Unicode text: a lone surrogate (a YAML or JSON escape such as
    "\\ud800") cannot be encoded as UTF-8, so the API server and every writer would refuse it."""
    # Nearly every spec has none: look first without building a path for every key (a tenth of
    # `kaiwu validate`'s checking was these paths); name the places only when there is one.
    return list(_check_text(value, path)) if _has_surrogate(value) else []


def _has_surrogate(value: Any) -> bool:
    """Whether a string anywhere in `value`, keys included, holds a lone surrogate."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii() and _SURROGATE.search(node):
                return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _check_text(value: Any, path: Path) -> Iterator[Violation]:
    if isinstance(value, str):
        if _SURROGATE.search(value):
            yield Violation(path, "contains a lone UTF-16 surrogate (an escape such as \\ud800), "
                            "which is not text", "remove the escape or write the character itself")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _check_text(key, (*path, _printable(key)))
            yield from _check_text(item, (*path, _printable(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _check_text(item, (*path, index))


def _printable(key: Any) -> str:
    """A key safe to print in a path (surrogates shown as escapes)."""
    return str(key).encode("utf-8", "backslashreplace").decode("utf-8")


def check_metadata(meta: dict[str, Any]) -> list[Violation]:
    """Problems with the cluster's name and namespace (checkable before defaults apply)."""
    return list(_check_metadata(meta))


def _check_metadata(meta: dict[str, Any]) -> Iterator[Violation]:
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        yield Violation(("metadata", "name"), "the cluster has no name", "set metadata.name")
        return
    if not DNS_1035_LABEL.match(name):
        yield Violation(("metadata", "name"), f"{name!r} is not a valid cluster name",
                        "use lower-case letters, digits and '-', starting with a letter")
    if len(name) > MAX_NAME_LENGTH:
        yield Violation(("metadata", "name"), f"{name!r} is {len(name)} characters long",
                        f"use at most {MAX_NAME_LENGTH} (pod, volume and Service names grow it)")
    namespace = meta.get("namespace")
    if namespace is not None and not (isinstance(namespace, str)
                                      and DNS_1123_LABEL.match(namespace)):
        yield Violation(("metadata", "namespace"), f"{namespace!r} is not a valid namespace",
                        "use lower-case letters, digits and '-'")
    elif isinstance(namespace, str) and len(namespace) > MAX_NAMESPACE_LENGTH:
        yield Violation(("metadata", "namespace"),
                        f"{namespace[:20]!r}... is {len(namespace)} characters long",
                        f"a namespace name has at most {MAX_NAMESPACE_LENGTH} characters")
    for field in ("labels", "annotations"):
        if field in meta and not isinstance(meta[field], dict):
            yield Violation(("metadata", field), f"metadata.{field} must be a mapping",
                            "write key: value pairs")
        elif field in meta:
            # The KaiwuCluster's own metadata: the API server checks it like any object's.
            values = {str(key): str(value) for key, value in meta[field].items()}
            yield from check_metadata_map(("metadata", field), values, field == "labels")
            if field == "annotations":
                yield from check_annotation_size(("metadata", field), values, 0)
    yield from _check_text(meta, ("metadata",))


def check_spec_metadata(spec: dict[str, Any]) -> Iterator[Violation]:
    """The labels and annotations a spec puts on what it renders: valid keys and values, a
    size the API server accepts, and none of the labels that select the cluster's pods."""
    for field in ("labels", "annotations"):
        yield from check_metadata_map(("spec", field), spec.get(field, {}), field == "labels")
    yield from check_metadata_map(("spec", "scheduling", "nodeSelector"),
                                  spec["scheduling"].get("nodeSelector", {}), True)
    yield from check_metadata_map(("spec", "service", "annotations"),
                                  spec["service"].get("annotations", {}), False)
    # Every rendered object carries spec.annotations; the client Service also service.annotations
    # (reported there only when spec.annotations alone fit).
    common = list(check_annotation_size(("spec", "annotations"), spec.get("annotations", {}),
                                        OPERATOR_ANNOTATION_BYTES))
    yield from common
    if not common and spec["service"].get("annotations"):
        yield from check_annotation_size(
            ("spec", "service", "annotations"),
            {**spec.get("annotations", {}), **spec["service"]["annotations"]},
            OPERATOR_ANNOTATION_BYTES)
    for key in SELECTOR_LABELS:
        if key in spec.get("labels", {}):
            yield Violation(("spec", "labels", key), f"label {key!r} is set by the operator",
                            "remove it: it selects the cluster's pods")


def check_object_names(spec: dict[str, Any]) -> Iterator[Violation]:
    """The names of the objects a spec refers to (Secrets, classes) are object names."""
    candidates: list[tuple[Path, str | None]] = [
        (("spec", "tls", "nodeSecretName"), spec["tls"].get("nodeSecretName")),
        (("spec", "tls", "clientSecretName"), spec["tls"].get("clientSecretName")),
        (("spec", "storage", "storageClassName"), spec["storage"].get("storageClassName")),
        (("spec", "scheduling", "priorityClassName"),
         spec["scheduling"].get("priorityClassName")),
    ]
    candidates += [(("spec", "image", "pullSecrets", index), name)
                   for index, name in enumerate(spec["image"].get("pullSecrets", []))]
    candidates += [(("spec", "extraEnv", index, "secretKeyRef", "name"),
                    item["secretKeyRef"]["name"])
                   for index, item in enumerate(spec.get("extraEnv", []))
                   if "secretKeyRef" in item]
    for path, name in candidates:
        if name and not (len(name) <= 253 and DNS_1123_SUBDOMAIN.match(name)):
            yield Violation(path, f"{name!r} is not a valid object name",
                            "use lower-case letters, digits, '-' and '.'")


def check_allowed_namespaces(spec: dict[str, Any]) -> Iterator[Violation]:
    """The namespaces the NetworkPolicy admits are namespace names."""
    for index, namespace in enumerate(spec["networkPolicy"].get("allowedNamespaces", [])):
        if not (len(namespace) <= MAX_NAMESPACE_LENGTH and DNS_1123_LABEL.match(namespace)):
            yield Violation(("spec", "networkPolicy", "allowedNamespaces", index),
                            f"{namespace!r} is not a namespace name", "use a namespace name")


def check_metadata_map(path: Path, values: dict[str, str], labels: bool) -> Iterator[Violation]:
    """Label or annotation keys, and label values, as the API server accepts them."""
    for key, value in values.items():
        if not is_qualified_name(key):
            yield Violation((*path, key), f"{key!r} is not a valid key",
                            "use [prefix/]name with letters, digits, '-', '_' and '.'")
        if labels and not (len(value) <= 63 and LABEL_VALUE.match(value)):
            yield Violation((*path, key), f"{value!r} is not a valid label value",
                            "use at most 63 letters, digits, '-', '_' or '.'")


def annotation_bytes(values: dict[str, str]) -> int:
    """The size the API server counts for an object's annotations: keys and values in bytes."""
    return sum(len(text.encode("utf-8", "surrogatepass"))
               for key, value in values.items() for text in (key, value))


def check_annotation_size(path: Path, values: dict[str, str],
                          reserved: int) -> Iterator[Violation]:
    """The annotations fit on one object, `reserved` bytes left for the operator's own."""
    size = annotation_bytes(values)
    if size + reserved > MAX_ANNOTATION_BYTES:
        room = MAX_ANNOTATION_BYTES - reserved
        yield Violation(path, f"the annotations total {size} bytes, more than Kubernetes accepts "
                        f"on one object ({MAX_ANNOTATION_BYTES} bytes"
                        + (f", {reserved} of them kept for the operator's own)" if reserved
                           else ")"),
                        f"keep keys and values under {room} bytes in all; put large data in a "
                        "ConfigMap")


def is_qualified_name(key: str) -> bool:
    """A label, annotation, taint or resource key: [prefix/]name, as the API server reads it."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and DNS_1123_SUBDOMAIN.match(prefix)):
        return False  # "/name" has an empty prefix, which Kubernetes refuses
    return 0 < len(name) <= 63 and bool(LABEL_NAME.match(name))
