"""Rules a schema cannot express (Kubernetes 1.20 has no CEL): names, modes, sizes, flags.

Called by `renderer.render` after schema validation, on the object with defaults applied, and by
the reconciler before it acts on a live object. `check_change` holds the rules about a change
from one spec to the next (`check_transition`: start mode is immutable, volumes never shrink,
single-replica never scales in; `check_version_change`: no downgrade, no major jump), used by
`kaiwu diff`, by the reconciler's admission webhook and by the reconciler itself, which keeps
the `transition_facts` of the last spec it applied to judge the next one
(reconciler.controller.admission).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from renderer import quantity
from renderer.spec import parse_duration

# kwbase flags the renderer sets itself; a user override would break the cluster's wiring.
MANAGED_FLAGS = {
    "--join": "the join list is derived from the cluster's pods",
    "--store": "the store is the volume from spec.storage",
    "--listen-addr": "addresses are fixed by the Services",
    "--advertise-addr": "each pod advertises its stable DNS name",
    "--brpc-addr": "the brpc port must match every Service (27257)",
    "--http-addr": "the HTTP port is fixed at 8080 (probes and metrics use it)",
    "--sql-addr": "SQL is served on the listen address",
    "--advertise-host": "each pod advertises its stable DNS name",
    "--insecure": "use spec.tls.enabled",
    "--certs-dir": "use spec.tls (certificates are mounted by the operator)",
    "--cache": "use spec.cache",
    "--max-sql-memory": "use spec.maxSQLMemory",
    "--background": "the container must run kwbase in the foreground",
    "--pid-file": "the container must run kwbase in the foreground",
    "--upgrade-complete": "upgrades are driven by the reconciler",
    # Aliases of the address flags: the last one given wins (kwbase/pkg/cli/flags.go:170-175),
    # so each would move a port the Services, probes and join list use.
    "--host": "addresses are fixed by the Services",
    "--port": "the SQL and RPC port is fixed at 26257 (Services, join list, probes)",
    "--http-host": "the HTTP address is fixed (probes and metrics use it)",
    "--http-port": "the HTTP port is fixed at 8080 (probes and metrics use it)",
    "--advertise-port": "each pod advertises its stable DNS name on 26257",
    "--advertise-sql-addr": "SQL is advertised on the pod's stable DNS name",
    "--locality-advertise-addr": "each pod advertises its stable DNS name",
    "--cluster-name": "the operator's kwbase commands carry no cluster name, and a node "
                      "refuses a peer whose name differs (kwbase/pkg/rpc/heartbeat.go:78-93)",
    "--cert-principal-map": "certificates are read as issued: users from the CN and DNS names",
    "--external-io-dir": "backups and restores use the store's extern directory",
    "--external-io-disable-http": "restores read the backup over https",
    "--ts-store": "the time-series store lives with the store, on the volume from spec.storage",
    "--logtostderr": "the operator sets it: a crashed node's last words are read from stderr",
}
MAX_OFFSET_FLAG = "--max-offset"
MAX_OFFSET_DEFAULT = "500ms"
MAX_OFFSET_LIMIT = timedelta(seconds=5)
"""KWDB's clock offset bound: 500ms unless set, at most 5s (kwbase/pkg/base/constants.go:31;
server/config.go:87, 119-129), the same on every node: a node whose peer's differs panics
(rpc/heartbeat.go:160-167), so it changes only with every node stopped at once
(cli/cliflags/flags.go:707-718), which a rolling restart is not."""
RESERVED_ENV = {"POD_NAME", "POD_NAMESPACE", "LD_LIBRARY_PATH", "KWBASE_CERTS_DIR",
                "KWBASE_SKIP_KEY_PERMISSION_CHECK", "KAIWU_UPGRADE_COMPLETE"}
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
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
SECRET_KEY = re.compile(r"^(?!\.\.?\Z)[-._a-zA-Z0-9]+\Z")
FLAG = re.compile(r"^--[a-z][a-z0-9-]*(=.*)?$", re.DOTALL)
# prometheus-operator's Duration (the ServiceMonitor CRD): units in order, each at most once.
PROMETHEUS_DURATION = re.compile(r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?\Z")
# spec.tls.clientUsers (the CRD's pattern too): a SQL name needing no quotes, and a Secret name
# once `_` becomes `-`.
SQL_USER = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")
# root has its own Secret; a client certificate with CN node would authenticate as a node.
RESERVED_USERS = {"root": "root's certificate is the cluster's <cluster>-root-client-certs",
                  "node": "a certificate with CN node authenticates as a KaiwuDB node"}
MAX_CLIENT_USERS = 20
# A lone UTF-16 surrogate, which a "\\ud800" escape in YAML or JSON makes (not text).
_SURROGATE = re.compile("[\ud800-\udfff]")
FRACTION = re.compile(r"^(0?\.[0-9]+|[0-9]+(\.[0-9]+)?%)\Z")
# Sizes below one mebibyte are a unit left out ("storage.size: 10" is 10 bytes), never meant.
ONE_MI = 1024 * 1024
# The time-series engine allocates well beyond --cache and --max-sql-memory (kaiwudb-facts.md).
MAX_MEMORY_FRACTION = Decimal("0.8")

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Violation:
    """A broken rule: where in the object, what is wrong and what to do."""

    path: Path
    message: str
    fix: str


def check(obj: dict[str, Any]) -> list[Violation]:
    """Every semantic problem of one KaiwuCluster (schema-valid, defaults applied)."""
    return (check_metadata(obj.get("metadata", {})) + list(_check_spec(obj["spec"]))
            + check_text(obj.get("spec", {}), ("spec",)))


def check_text(value: Any, path: Path = ()) -> list[Violation]:
    """Strings that are not Unicode text: a lone surrogate (a YAML or JSON escape such as
    "\\ud800") cannot be encoded as UTF-8, so the API server and every writer would refuse it."""
    return list(_check_text(value, path))


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
            yield from _check_metadata_map(("metadata", field), values, field == "labels")
            if field == "annotations":
                yield from _check_annotation_size(("metadata", field), values, 0)
    yield from _check_text(meta, ("metadata",))


def _check_spec(spec: dict[str, Any]) -> Iterator[Violation]:
    yield from _check_mode(spec)
    yield from _check_memory(spec)
    yield from _check_resources(spec)
    yield from _check_args(spec.get("extraArgs", []))
    yield from _check_env(spec.get("extraEnv", []))
    for field in ("labels", "annotations"):
        yield from _check_metadata_map(("spec", field), spec.get(field, {}), field == "labels")
    yield from _check_metadata_map(("spec", "scheduling", "nodeSelector"),
                                   spec["scheduling"].get("nodeSelector", {}), True)
    yield from _check_metadata_map(("spec", "service", "annotations"),
                                   spec["service"].get("annotations", {}), False)
    # Every rendered object carries spec.annotations; the client Service also service.annotations
    # (reported there only when spec.annotations alone fit).
    common = list(_check_annotation_size(("spec", "annotations"), spec.get("annotations", {}),
                                         OPERATOR_ANNOTATION_BYTES))
    yield from common
    if not common and spec["service"].get("annotations"):
        yield from _check_annotation_size(
            ("spec", "service", "annotations"),
            {**spec.get("annotations", {}), **spec["service"]["annotations"]},
            OPERATOR_ANNOTATION_BYTES)
    for key in SELECTOR_LABELS:
        if key in spec.get("labels", {}):
            yield Violation(("spec", "labels", key), f"label {key!r} is set by the operator",
                            "remove it: it selects the cluster's pods")
    yield from _check_names(spec)
    if spec["startMode"] == "multi-replica" and spec["podDisruptionBudget"]["maxUnavailable"] > 1:
        yield Violation(("spec", "podDisruptionBudget", "maxUnavailable"),
                        "more than 1 node down at once loses quorum with 3 replicas",
                        "use maxUnavailable: 1")
    spreads: set[tuple[str, str]] = set()
    for index, spread in enumerate(spec["scheduling"].get("topologySpread", [])):
        if not _is_qualified_name(spread["topologyKey"]):
            yield Violation(("spec", "scheduling", "topologySpread", index, "topologyKey"),
                            f"{spread['topologyKey']!r} is not a node label key",
                            "use a key such as topology.kubernetes.io/zone")
        pair = (spread["topologyKey"], spread["whenUnsatisfiable"])
        if pair in spreads:  # the API server refuses duplicate (key, whenUnsatisfiable) pairs
            yield Violation(("spec", "scheduling", "topologySpread", index),
                            f"{pair[0]} with {pair[1]} is given twice", "keep one")
        spreads.add(pair)
    for index, toleration in enumerate(spec["scheduling"].get("tolerations", [])):
        yield from _check_toleration(("spec", "scheduling", "tolerations", index), toleration)
    yield from _check_durations(spec)
    yield from _check_pod_security(spec["podSecurity"])
    yield from _check_exposure(spec)


def _check_exposure(spec: dict[str, Any]) -> Iterator[Violation]:
    # An insecure kwbase (--insecure) takes any client as any user, root included, with no
    # password: outside the cluster that is an open door, refused unless the spec says it knows.
    service = spec["service"]
    if (not spec["tls"]["enabled"] and service["type"] in ("NodePort", "LoadBalancer")
            and not service.get("allowInsecureExposure")):
        yield Violation(("spec", "service", "type"),
                        f"type {service['type']} exposes an insecure cluster (tls.enabled: "
                        "false) outside Kubernetes: anyone who reaches it is root, no password",
                        "enable TLS, use type ClusterIP, or set "
                        "spec.service.allowInsecureExposure: true to accept the risk")


def _check_pod_security(security: dict[str, Any]) -> Iterator[Violation]:
    # The kubelet would refuse to start the container (CreateContainerConfigError) and the
    # cluster would sit there: say so before anything is applied.
    if security["runAsNonRoot"] and security["runAsUser"] == 0:
        yield Violation(("spec", "podSecurity", "runAsUser"),
                        "runAsUser 0 is root, which runAsNonRoot forbids",
                        "use a non-root uid such as 1000, or set runAsNonRoot: false for an "
                        "image that needs root (Pod Security baseline, not restricted)")


def _check_durations(spec: dict[str, Any]) -> Iterator[Violation]:
    for section, field in (("failover", "nodeLostTimeout"), ("failover", "podNotReadyTimeout"),
                           ("monitoring", "interval")):
        try:
            parse_duration(spec[section][field])
        except ValueError as error:
            yield Violation(("spec", section, field), str(error), "use e.g. 30s, 5m or 1h30m")
    interval = spec["monitoring"]["interval"]
    if not PROMETHEUS_DURATION.match(interval):
        yield Violation(("spec", "monitoring", "interval"),
                        f"{interval!r} is not a Prometheus duration",
                        "write each unit once, largest first, e.g. 1m30s")


def _check_toleration(path: Path, toleration: dict[str, Any]) -> Iterator[Violation]:
    """The API server's rules for a pod's tolerations (core/v1 ValidateTolerations)."""
    key, value = toleration.get("key", ""), toleration.get("value", "")
    exists = toleration.get("operator") == "Exists"
    if exists and value:
        yield Violation((*path, "value"), "a toleration with operator Exists takes no value",
                        "remove value, or use operator Equal")
    if not key and not exists:
        yield Violation(path, "a toleration without a key must use operator Exists",
                        "set a key, or operator: Exists to tolerate every taint")
    if key and not _is_qualified_name(key):
        yield Violation((*path, "key"), f"{key!r} is not a taint key",
                        "use [prefix/]name with letters, digits, '-', '_' and '.'")
    if not exists and not (len(value) <= 63 and LABEL_VALUE.match(value)):
        yield Violation((*path, "value"), f"{value!r} is not a valid taint value",
                        "use at most 63 letters, digits, '-', '_' or '.'")
    if "tolerationSeconds" in toleration and toleration.get("effect") != "NoExecute":
        yield Violation((*path, "tolerationSeconds"),
                        "tolerationSeconds applies only to effect NoExecute",
                        "set effect: NoExecute, or remove tolerationSeconds")


def _check_mode(spec: dict[str, Any]) -> Iterator[Violation]:
    mode, replicas = spec["startMode"], spec["replicas"]
    if mode == "multi-replica" and replicas < 3:
        yield Violation(("spec", "replicas"),
                        f"multi-replica needs at least 3 nodes, got {replicas}",
                        "set replicas to 3 or more, or use startMode single-replica")
    if mode == "single-node" and replicas != 1:
        yield Violation(("spec", "replicas"), f"single-node runs exactly 1 node, got {replicas}",
                        "set replicas: 1, or use startMode multi-replica for a cluster")


def kwbase_percent(text: str) -> int:
    """The whole percent kwbase makes of a FRACTION (cli/flags_util.go bytesOrPercentageValue):
    strconv.ParseFloat(s, 32), times 100 for `.25` or 1 for `25%`, truncated. A float32 .01 is
    0.0099999998, so `.01` is 0%: kwbase accepts only 1..99."""
    number, multiplier = (text[:-1], 1.0) if text.endswith("%") else (text, 100.0)
    as_float32: float = struct.unpack("f", struct.pack("f", float(number)))[0]
    return int(as_float32 * multiplier)


def _check_memory(spec: dict[str, Any]) -> Iterator[Violation]:
    fractions = Decimal(0)
    for field in ("cache", "maxSQLMemory"):
        text = spec[field]
        if FRACTION.match(text):
            value = Decimal(text[:-1]) / 100 if text.endswith("%") else Decimal(text)
            percent = kwbase_percent(text)
            if not 1 <= percent <= 99:
                yield Violation(("spec", field), (
                    f"{text!r} is {percent}% to kwbase, which refuses it (percentage {percent}% "
                    "out of range 1% - 99%) and the pod would crash-loop"),
                                "use a whole percentage from 1% to 99%, e.g. .25 or 25%")
            fractions += value
            continue
        try:
            size = quantity.parse(text)
        except quantity.QuantityError:
            yield Violation(("spec", field), f"{text!r} is neither a fraction nor a quantity",
                            "use a fraction such as .25 or 25%, or a size such as 2Gi")
            continue
        if size.value <= 0:
            yield Violation(("spec", field), f"{text!r} is not a positive size",
                            "use a fraction such as .25 or 25%, or a size such as 2Gi")
    if fractions > MAX_MEMORY_FRACTION:
        yield Violation(("spec", "maxSQLMemory"),
                        f"cache and maxSQLMemory add up to {fractions:.0%} of the memory limit",
                        "keep them at most 80% together: the time-series engine needs the rest")


def _check_resources(spec: dict[str, Any]) -> Iterator[Violation]:
    resources = spec["resources"]
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    for section, values in (("requests", requests), ("limits", limits)):
        for name in values:
            path: Path = ("spec", "resources", section, name)
            if not _is_container_resource(name):
                yield Violation(path, f"{name!r} is not a resource name",
                                "use cpu, memory, ephemeral-storage, hugepages-<size> or an "
                                "extended resource such as example.com/gpu")
            try:
                value = quantity.parse(values[name]).value
            except quantity.QuantityError as error:  # the schema's pattern admits 1e999999
                yield Violation(path, str(error), "use a quantity such as 4 or 8Gi")
                continue
            if value < 0:
                yield Violation(path, f"{values[name]} is negative", "use 0 or more")
            elif name == "memory" and 0 < value < ONE_MI:
                # Kubernetes reads a bare number as bytes: "memory: 512" is half a kilobyte.
                yield Violation(path, f"memory {values[name]} is {value} bytes (a number "
                                "without a unit is bytes)", "write the unit, e.g. 8Gi")
            elif value == 0 and name == "memory":
                # kwbase sizes its cache and SQL memory as fractions of it: 0 bytes runs nothing.
                yield Violation(path, f"memory {values[name]} is zero",
                                "use a size such as 8Gi, or leave it out")
            elif _is_extended_resource(name) and value != value.to_integral_value():
                yield Violation(path, f"{values[name]} is not a whole number",
                                f"{name} is counted in whole devices")
    for name in sorted(set(requests) | set(limits)):
        try:
            request = quantity.parse(requests[name]) if name in requests else None
            limit = quantity.parse(limits[name]) if name in limits else None
        except quantity.QuantityError:
            continue  # reported above
        extended = _is_extended_resource(name)
        if extended and request is not None and (limit is None or limit.value != request.value):
            # Devices cannot be overcommitted: the API server wants request == limit.
            yield Violation(("spec", "resources", "requests", name),
                            f"{name} needs a limit equal to its request",
                            f"set limits.{name} to {requests[name]}")
        elif request is not None and limit is not None and request.value > limit.value:
            yield Violation(("spec", "resources", "requests", name),
                            f"request {requests[name]} is above the limit {limits[name]}",
                            "raise the limit or lower the request")
    try:
        size = quantity.parse(spec["storage"]["size"])
    except quantity.QuantityError as error:
        yield Violation(("spec", "storage", "size"), str(error), "use a size such as 100Gi")
        return
    if size.value <= 0:
        yield Violation(("spec", "storage", "size"), "the volume size must be positive",
                        "use a size such as 100Gi")
    elif size.value < ONE_MI:
        yield Violation(("spec", "storage", "size"),
                        f"{spec['storage']['size']} is {size.value} bytes, too small for a store "
                        "(a number without a unit is bytes)", "write the unit, e.g. 100Gi")


def _check_args(args: list[str]) -> Iterator[Violation]:
    seen: dict[str, int] = {}
    for index, arg in enumerate(args):
        path: Path = ("spec", "extraArgs", index)
        if not FLAG.match(arg):
            yield Violation(path, f"{arg!r} is not a kwbase flag",
                            "write one flag per item as --name=value or --name")
            continue
        name = arg.split("=", 1)[0]
        if name in MANAGED_FLAGS:
            yield Violation(path, f"{name} is managed by the operator", MANAGED_FLAGS[name])
        if name == MAX_OFFSET_FLAG:
            problem = _max_offset_problem(arg.partition("=")[2])
            if problem:
                yield Violation(path, problem, "write a duration such as 250ms or 1s, at most 5s")
        if "\n" in arg or "\x00" in arg:
            yield Violation(path, f"{name} contains a line break or NUL", "remove it")
        if name in seen:
            yield Violation(path, f"{name} is given twice (also item {seen[name]})",
                            "keep one")
        seen[name] = index


def _max_offset_problem(value: str) -> str:
    """Why `--max-offset=<value>` is refused ("" when it is not). KWDB reads a Go duration of
    at most 5s; the plain forms parse_duration reads are accepted (not 1.5s: write 1500ms)."""
    try:
        offset = parse_duration(value)
    except ValueError:
        return f"--max-offset={value} is not a duration"
    if offset > MAX_OFFSET_LIMIT:
        return f"--max-offset={value} is more than 5s, which kwbase refuses to start with"
    return ""


def _same_offset(a: str, b: str) -> bool:
    try:
        return parse_duration(a) == parse_duration(b)
    except ValueError:
        return a == b


def max_offset(spec: dict[str, Any]) -> str | None:
    """The clock offset bound a spec gives its nodes ("500ms" unless --max-offset says); None
    for transition facts written before they held it (not known)."""
    if "maxOffset" in spec:
        return str(spec["maxOffset"])
    if set(spec) <= FACT_KEYS:
        return None
    given = [arg.partition("=")[2] for arg in spec.get("extraArgs") or ()
             if arg.split("=", 1)[0] == MAX_OFFSET_FLAG]
    return given[-1] if given else MAX_OFFSET_DEFAULT


def _check_env(env: list[dict[str, Any]]) -> Iterator[Violation]:
    seen: set[str] = set()
    for index, item in enumerate(env):
        name = item["name"]
        path: Path = ("spec", "extraEnv", index)
        if not ENV_NAME.match(name):
            yield Violation((*path, "name"), f"{name!r} is not an environment variable name",
                            "use letters, digits and '_', not starting with a digit")
        if name in RESERVED_ENV:
            yield Violation((*path, "name"), f"{name} is set by the operator",
                            "choose another name")
        if name in seen:
            yield Violation((*path, "name"), f"{name} is defined twice", "keep one")
        seen.add(name)
        if ("value" in item) == ("secretKeyRef" in item):
            yield Violation(path, f"{name} needs exactly one of value and secretKeyRef",
                            "give either a value or a secretKeyRef")
        key = item.get("secretKeyRef", {}).get("key")
        if key is not None and not (len(key) <= 253 and SECRET_KEY.match(key)
                                    and not key.startswith("..")):
            yield Violation((*path, "secretKeyRef", "key"), f"{key!r} is not a Secret key",
                            "use letters, digits, '-', '_' and '.'")


def _check_metadata_map(path: Path, values: dict[str, str], labels: bool) -> Iterator[Violation]:
    for key, value in values.items():
        if not _is_qualified_name(key):
            yield Violation((*path, key), f"{key!r} is not a valid key",
                            "use [prefix/]name with letters, digits, '-', '_' and '.'")
        if labels and not (len(value) <= 63 and LABEL_VALUE.match(value)):
            yield Violation((*path, key), f"{value!r} is not a valid label value",
                            "use at most 63 letters, digits, '-', '_' or '.'")


def annotation_bytes(values: dict[str, str]) -> int:
    """The size the API server counts for an object's annotations: keys and values in bytes."""
    return sum(len(text.encode("utf-8", "surrogatepass"))
               for key, value in values.items() for text in (key, value))


def _check_annotation_size(path: Path, values: dict[str, str],
                           reserved: int) -> Iterator[Violation]:
    size = annotation_bytes(values)
    if size + reserved > MAX_ANNOTATION_BYTES:
        room = MAX_ANNOTATION_BYTES - reserved
        yield Violation(path, f"the annotations total {size} bytes, more than Kubernetes accepts "
                        f"on one object ({MAX_ANNOTATION_BYTES} bytes"
                        + (f", {reserved} of them kept for the operator's own)" if reserved
                           else ")"),
                        f"keep keys and values under {room} bytes in all; put large data in a "
                        "ConfigMap")


def _check_tls(tls: dict[str, Any]) -> Iterator[Violation]:
    """spec.tls beyond the schema: client user names, and what needs managed certificates."""
    path: Path = ("spec", "tls")
    own = bool(tls.get("nodeSecretName"))
    users = tls.get("clientUsers", [])
    if len(users) > MAX_CLIENT_USERS:
        yield Violation((*path, "clientUsers"), f"{len(users)} users are listed",
                        f"list at most {MAX_CLIENT_USERS}")
    seen: set[str] = set()
    for index, name in enumerate(users):
        where = (*path, "clientUsers", index)
        if not (isinstance(name, str) and SQL_USER.match(name)):
            yield Violation(where, f"{name!r} is not a SQL user name this operator issues for",
                            "use a lower-case letter, then lower-case letters, digits or '_', "
                            "at most 32 characters")
        elif name in RESERVED_USERS:
            yield Violation(where, f"{name!r} is reserved: {RESERVED_USERS[name]}",
                            "remove it" if name == "root" else "choose another user name")
        elif name in seen:
            yield Violation(where, f"{name!r} is listed twice", "keep one")
        seen.add(name)
    if users and own:
        yield Violation((*path, "clientUsers"),
                        "client certificates are issued with the cluster's CA, which the "
                        "reconciler holds only when it manages the certificates",
                        "issue them with your own CA, or clear nodeSecretName and "
                        "clientSecretName")
    if users and not tls["enabled"]:
        yield Violation((*path, "clientUsers"), "client certificates need TLS",
                        "set spec.tls.enabled: true, or remove clientUsers")
    if tls.get("secretLayout", "kwbase") != "kwbase" and not own:
        yield Violation((*path, "secretLayout"),
                        f"secretLayout {tls['secretLayout']} describes your own Secrets, and "
                        "none are named",
                        "set nodeSecretName and clientSecretName, or remove secretLayout")


def _check_names(spec: dict[str, Any]) -> Iterator[Violation]:
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
    if bool(spec["tls"].get("nodeSecretName")) != bool(spec["tls"].get("clientSecretName")):
        yield Violation(("spec", "tls"),
                        "name both nodeSecretName and clientSecretName, or neither",
                        "your own certificates need both Secrets; leave both empty to let the "
                        "operator manage them")
    yield from _check_tls(spec["tls"])
    for index, namespace in enumerate(spec["networkPolicy"].get("allowedNamespaces", [])):
        if not (len(namespace) <= MAX_NAMESPACE_LENGTH and DNS_1123_LABEL.match(namespace)):
            yield Violation(("spec", "networkPolicy", "allowedNamespaces", index),
                            f"{namespace!r} is not a namespace name", "use a namespace name")


def _is_container_resource(name: str) -> bool:
    """What the API server accepts in a container's resources (validateContainerResourceName):
    the standard names, hugepages-<size>, or a qualified name with a domain prefix."""
    if "/" not in name:
        return name in ("cpu", "memory", "ephemeral-storage") or (
            name.startswith("hugepages-") and _is_qualified_name(name))
    return _is_qualified_name(name)


def _is_extended_resource(name: str) -> bool:
    """A device or other extended resource: domain-prefixed, outside kubernetes.io."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _is_qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and DNS_1123_SUBDOMAIN.match(prefix)):
        return False  # "/name" has an empty prefix, which Kubernetes refuses
    return 0 < len(name) <= 63 and bool(LABEL_NAME.match(name))


def transition_notes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What a reviewer should know of an accepted change from spec `old` to `new` (both
    defaulted) that the manifests do not show: said by `kaiwu diff` (renderer.diff) and as the
    admission webhook's warnings (reconciler.controller.admission), each at most 120
    characters (the webhook's limit on a warning)."""
    notes = []
    try:
        grows = (quantity.parse(new["storage"]["size"]).value
                 > quantity.parse(old["storage"]["size"]).value)
    except (quantity.QuantityError, KeyError, TypeError):
        grows = False
    if grows:
        # Say the one thing that cannot be undone (reconciler.controller.volumes grows them).
        before = quantity.canonical(old["storage"]["size"])
        after = quantity.canonical(new["storage"]["size"])
        notes.append(f"spec.storage.size {before} -> {after}: volumes grow only if their "
                     "StorageClass allows expansion; no going back down")
    return notes


def check_transition(old: dict[str, Any], new: dict[str, Any]) -> list[Violation]:
    """Problems with changing a cluster from spec `old` to spec `new` (both defaulted)."""
    problems = []
    if old["startMode"] != new["startMode"]:
        problems.append(Violation(
            ("spec", "startMode"),
            f"the start mode cannot change ({old['startMode']} -> {new['startMode']}): "
            "it is written into every store",
            "keep the old start mode, or create a new cluster and migrate the data"))
    if new["startMode"] == "single-replica" and new["replicas"] < old["replicas"]:
        problems.append(Violation(
            ("spec", "replicas"), "a single-replica cluster cannot scale in (no second copy of "
            "the data exists)", f"keep replicas at {old['replicas']} or more"))
    try:
        shrinks = (quantity.parse(new["storage"]["size"]).value
                   < quantity.parse(old["storage"]["size"]).value)
    except quantity.QuantityError:
        shrinks = False
    if shrinks:
        problems.append(Violation(
            ("spec", "storage", "size"),
            f"volumes cannot shrink ({old['storage']['size']} -> {new['storage']['size']})",
            f"keep {old['storage']['size']} or more"))
    before, after = max_offset(old), max_offset(new)
    if before is not None and after is not None and not _same_offset(before, after):
        problems.append(Violation(
            ("spec", "extraArgs"),
            f"--max-offset cannot change on a running cluster ({before} -> {after}): every "
            "node must use the same value, a node whose peer's differs panics "
            "(kwbase/pkg/rpc/heartbeat.go:160-167), and a rolling restart changes one node at "
            "a time",
            f"keep --max-offset={before} (KWDB changes it only with every node stopped at "
            "once)"))
    if old["storage"].get("storageClassName") != new["storage"].get("storageClassName"):
        problems.append(Violation(
            ("spec", "storage", "storageClassName"),
            "the storage class of existing volumes cannot change",
            "keep the old class; migrate by adding nodes on new storage in a new cluster"))
    return problems


def version_tuple(text: str) -> tuple[int, ...] | None:
    """3.2.1 -> (3, 2, 1), as the reconciler reads image tags; None for anything else."""
    parts = text.split("-", 1)[0].lstrip("vV").split(".")
    return tuple(int(part) for part in parts) if all(part.isdigit() for part in parts) else None


def check_version_change(old: dict[str, Any], new: dict[str, Any]) -> list[Violation]:
    """A version change KaiwuDB cannot make: a downgrade, or a change of major version (KaiwuDB
    documents neither; 2.x to 3.x needs an export and import). Tags that are not plain versions
    are not judged. `kaiwu diff` reports these as refused by the reconciler; the admission
    webhook and the reconciler refuse them (reconciler.controller.admission)."""
    before, after = version_tuple(str(old.get("version", ""))), version_tuple(
        str(new.get("version", "")))
    if before is None or after is None:
        return []
    if after < before:
        return [Violation(("spec", "version"),
                          f"the version cannot go back ({old['version']} -> {new['version']}): "
                          "KaiwuDB cannot be downgraded", f"keep {old['version']} or later")]
    if after[0] != before[0]:
        return [Violation(("spec", "version"),
                          f"the major version cannot change in place ({old['version']} -> "
                          f"{new['version']}): KaiwuDB needs an export and import into a new "
                          "cluster", f"keep {before[0]}.x")]
    return []


def check_change(old: dict[str, Any], new: dict[str, Any]) -> list[Violation]:
    """Every rule about changing a cluster from spec `old` to spec `new`: `check_transition`
    and `check_version_change`. `old` may be the full spec or its `transition_facts`."""
    return check_transition(old, new) + check_version_change(old, new)


def transition_facts(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a defaulted spec `check_change` reads from the old side: what the reconciler
    remembers of the last spec it applied (an annotation on the StatefulSet), so it can judge
    the next one against what exists rather than against whatever is stored now."""
    storage = {"size": spec["storage"]["size"]}
    if spec["storage"].get("storageClassName") is not None:
        storage["storageClassName"] = spec["storage"]["storageClassName"]
    return {"startMode": spec["startMode"], "replicas": spec["replicas"],
            "version": spec["version"], "storage": storage, "maxOffset": max_offset(spec)}


FACT_KEYS = frozenset({"startMode", "replicas", "version", "storage", "maxOffset"})
"""What `transition_facts` holds (an annotation written before maxOffset lacks it)."""
