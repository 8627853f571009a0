"""Hypothesis strategies for KaiwuCluster specs, generated from the CRD itself (types, enums,
patterns, bounds, optional fields) with the semantic rules layered on; and the schema mistakes
(out of range, bad enum, bad pattern) the renderer and the apiserver must both refuse.

Used by tests/unit/renderer/test_properties.py and tests/world_stories/renderer/test_render.py.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from renderer import quantity, schema
from renderer.semantics import resources as resource_rules
from renderer.versions import KNOWN_VERSIONS

# No shrinking: one example runs the CLI several times, so shrinking a failure would take
# minutes; the failure message already names the mistake, the file and the renderer's output.
PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=30,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SPEC_SCHEMA: dict[str, Any] = schema.openapi_schema()["properties"]["spec"]
INT_FORMATS = schema.INT_RANGES

# --- names, keys and values Kubernetes accepts (short, so failing examples stay readable) -----

DNS_LABEL = st.from_regex(r"[a-z]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)
DNS_SUBDOMAIN = st.from_regex(
    r"[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?){0,2}",
    fullmatch=True)
NAME_PART = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?", fullmatch=True)
QUALIFIED_NAME = st.one_of(NAME_PART, st.builds("{}/{}".format, DNS_SUBDOMAIN, NAME_PART))
# What the renderer must refuse in a spec, written down here from docs/architecture.md and
# /work/shared/kaiwudb-facts.md, never read from renderer.semantics: a generator filtered with
# the product's own set would silently follow a flag dropped from it, and so would the tests
# (tests/unit/renderer/test_semantics.py) that check each one is refused.
SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/managed-by", "app.kubernetes.io/component")
RESERVED_ENV = ("POD_NAME", "POD_NAMESPACE", "LD_LIBRARY_PATH", "KWBASE_CERTS_DIR",
                "KWBASE_SKIP_KEY_PERMISSION_CHECK", "KAIWU_UPGRADE_COMPLETE")
MANAGED_FLAGS = ("--join", "--store", "--listen-addr", "--advertise-addr", "--brpc-addr",
                 "--http-addr", "--sql-addr", "--advertise-host", "--insecure", "--certs-dir",
                 "--cache", "--max-sql-memory", "--background", "--pid-file",
                 "--upgrade-complete", "--host", "--port", "--http-host", "--http-port",
                 "--advertise-port", "--advertise-sql-addr", "--locality-advertise-addr",
                 "--cluster-name", "--cert-principal-map", "--external-io-dir",
                 "--external-io-disable-http", "--ts-store", "--logtostderr")
RESERVED_USERS = ("root", "node")
LABEL_KEY = QUALIFIED_NAME.filter(lambda key: key not in SELECTOR_LABELS)
LABEL_VALUE = st.from_regex(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,8})?[A-Za-z0-9])?", fullmatch=True)
# NEL, LINE SEPARATOR and PARAGRAPH SEPARATOR: line breaks to a YAML 1.1 reader (libyaml, the
# renderer's), plain characters to the YAML 1.2 writer that writes the generated specs
# (tests.support.render.to_text), which leaves them raw: such a file cannot say what was
# generated. (A pattern such as an ignore rule's pointer admits them.)
YAML_1_1_BREAKS = "\x85\u2028\u2029"
# Free text (annotation values, env values, flag values): any printable character, no controls.
FREE_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")),
                    max_size=12)
ENV_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True).filter(
    lambda name: name not in RESERVED_ENV)
SECRET_KEY = st.from_regex(r"[-._a-zA-Z0-9]{1,10}", fullmatch=True).filter(
    lambda key: key != "." and not key.startswith(".."))  # "." is no Secret key either
FLAG_NAME = st.from_regex(r"--[a-z][a-z0-9-]{0,10}", fullmatch=True).filter(
    # --max-offset takes a duration only (renderer.semantics.flags.MAX_OFFSET_FLAG); free
    # values would fail.
    lambda flag: flag not in MANAGED_FLAGS and flag != "--max-offset")
# Positive quantities as people write them: plain numbers, suffixes, exponents, YAML integers.
QUANTITY = st.one_of(
    st.builds("{}{}".format, st.integers(1, 999),
              st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "e3", "e6"])),
    st.builds("{}.{}{}".format, st.integers(0, 9), st.integers(1, 99),
              st.sampled_from(["", "Gi", "Mi", "k"])),
    st.integers(1, 64),
)


def from_schema(node: dict[str, Any], path: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """Values the CRD node admits; OVERRIDES (by path) add what the schema cannot say."""
    if path in OVERRIDES:
        return OVERRIDES[path]
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if node.get("x-kubernetes-int-or-string"):
        return QUANTITY
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        required = set(node.get("required", ()))
        fields = {name: from_schema(child, (*path, name))
                  for name, child in node["properties"].items()}
        return st.fixed_dictionaries(
            {name: strategy for name, strategy in fields.items() if name in required},
            optional={name: strategy for name, strategy in fields.items()
                      if name not in required})
    if kind == "object":
        values = from_schema(node.get("additionalProperties", {"type": "string"}), (*path, "*"))
        return st.dictionaries(OVERRIDES.get((*path, "<key>"), QUALIFIED_NAME), values,
                               max_size=3)
    if kind == "array":
        return st.lists(from_schema(node["items"], (*path, "[]")), max_size=3)
    if kind == "integer":
        low, high = INT_FORMATS.get(node.get("format", "int64"), INT_FORMATS["int64"])
        return st.integers(node.get("minimum", low), node.get("maximum", high))
    if kind == "boolean":
        return st.booleans()
    if kind == "string" and "pattern" in node:
        return st.from_regex(node["pattern"], fullmatch=True).filter(
            lambda text: node.get("minLength", 0) <= len(text) <= node.get("maxLength", len(text))
            and not any(char in YAML_1_1_BREAKS for char in text))
    if kind == "string":
        return FREE_TEXT if "maxLength" not in node else FREE_TEXT.filter(
            lambda text: len(text) <= node["maxLength"])
    raise AssertionError(f"the generator does not know the CRD node at {path}: {node}")


@st.composite
def tolerations(draw: st.DrawFn) -> dict[str, Any]:
    """A toleration the API server accepts."""
    toleration: dict[str, Any] = {}
    operator = draw(st.sampled_from(["Exists", "Equal", None]))
    if operator:
        toleration["operator"] = operator
    if operator != "Exists" or draw(st.booleans()):
        toleration["key"] = draw(QUALIFIED_NAME)
    if operator != "Exists" and draw(st.booleans()):
        toleration["value"] = draw(LABEL_VALUE)
    effect = draw(st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute", None]))
    if effect:
        toleration["effect"] = effect
    if effect == "NoExecute" and draw(st.booleans()):
        toleration["tolerationSeconds"] = draw(st.integers(0, 86400))
    return toleration


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any]:
    """Requests at most their limits; devices whole, with limit == request."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    names = draw(st.lists(st.sampled_from(["cpu", "memory", "ephemeral-storage",
                                           "hugepages-2Mi", "example.com/gpu"]),
                          unique=True, max_size=3))
    for name in names:
        if name == "example.com/gpu":
            count = draw(st.one_of(st.integers(0, 4), st.sampled_from(["1", "2"])))
            limits[name] = count
            if draw(st.booleans()):
                requests[name] = count
            continue
        shape = draw(st.sampled_from(["request", "limit", "both"]))
        if shape in ("limit", "both"):
            limits[name] = draw(QUANTITY)
        if shape in ("request", "both"):
            wanted = draw(QUANTITY)
            if shape == "both" and quantity.parse(wanted).value > quantity.parse(
                    limits[name]).value:
                wanted = limits[name]
            requests[name] = wanted
    result = {}
    if requests:
        result["requests"] = requests
    if limits:
        result["limits"] = limits
    return result


def _unique_by_name(items: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    seen: set[Any] = set()
    kept = []
    for item in items:
        if item[key] not in seen:
            seen.add(item[key])
            kept.append(item)
    return kept


ENV_ITEM = st.one_of(
    st.fixed_dictionaries({"name": ENV_NAME, "value": FREE_TEXT}),
    st.fixed_dictionaries({"name": ENV_NAME, "secretKeyRef": st.fixed_dictionaries(
        {"name": DNS_SUBDOMAIN, "key": SECRET_KEY})}),
)
FLAG = st.one_of(FLAG_NAME, st.builds("{}={}".format, FLAG_NAME, FREE_TEXT))
MEMORY = st.sampled_from([".1", ".25", "0.3", ".4", "10%", "25%", "40%", "512Mi", "2Gi", "1G"])

OVERRIDES: dict[tuple[str, ...], st.SearchStrategy[Any]] = {
    ("image", "pullSecrets", "[]"): DNS_SUBDOMAIN,
    ("resources",): resources(),
    ("storage", "size"): QUANTITY,
    ("storage", "storageClassName"): DNS_SUBDOMAIN,
    ("tls", "nodeSecretName"): DNS_SUBDOMAIN,
    ("tls", "clientSecretName"): DNS_SUBDOMAIN,
    ("cache",): MEMORY,
    ("maxSQLMemory",): MEMORY,
    ("scheduling", "topologySpread", "[]", "topologyKey"): QUALIFIED_NAME,
    ("scheduling", "nodeSelector", "<key>"): LABEL_KEY,
    ("scheduling", "nodeSelector", "*"): LABEL_VALUE,
    ("scheduling", "tolerations", "[]"): tolerations(),
    ("scheduling", "priorityClassName"): DNS_SUBDOMAIN,
    ("service", "annotations", "<key>"): QUALIFIED_NAME,
    ("extraArgs", "[]"): FLAG,
    ("extraEnv", "[]"): ENV_ITEM,
    ("labels", "<key>"): LABEL_KEY,
    ("labels", "*"): LABEL_VALUE,
    ("annotations", "<key>"): QUALIFIED_NAME,
    ("networkPolicy", "allowedNamespaces", "[]"): DNS_LABEL,
    # Prometheus durations: units largest first, each once (the ServiceMonitor CRD's rule).
    ("monitoring", "interval"): st.from_regex(r"([1-9][0-9]?h)?([1-9][0-9]?m)?[1-9][0-9]?s",
                                              fullmatch=True),
    ("failover", "nodeLostTimeout"): st.from_regex(r"([0-9]{1,4}(ms|s|m|h)){1,3}",
                                                   fullmatch=True),
    ("failover", "podNotReadyTimeout"): st.from_regex(r"([0-9]{1,4}(ms|s|m|h)){1,3}",
                                                      fullmatch=True),
}


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """A spec the CRD and every semantic rule accept."""
    spec: dict[str, Any] = draw(from_schema(SPEC_SCHEMA, ()))
    if "version" in spec and spec["version"] not in KNOWN_VERSIONS:
        spec["version"] = draw(st.sampled_from(KNOWN_VERSIONS))  # others need a flag
    mode = spec.get("startMode", "multi-replica")
    if mode == "multi-replica":
        if spec.get("replicas", 3) < 3:
            spec["replicas"] = draw(st.integers(3, 9))
        if "podDisruptionBudget" in spec and "maxUnavailable" in spec["podDisruptionBudget"]:
            spec["podDisruptionBudget"]["maxUnavailable"] = 1
    elif mode == "single-node":
        spec["replicas"] = 1
    tls = spec.get("tls", {})
    if ("nodeSecretName" in tls) != ("clientSecretName" in tls):
        tls.pop("nodeSecretName", None)
        tls.pop("clientSecretName", None)
    if "clientUsers" in tls:  # issued by the reconciler's CA: TLS on, its own certificates
        users = [u for u in dict.fromkeys(tls["clientUsers"]) if u not in RESERVED_USERS]
        tls["clientUsers"] = users
        if "nodeSecretName" in tls or not tls.get("enabled", True):
            del tls["clientUsers"]
    if "secretLayout" in tls and "nodeSecretName" not in tls:
        del tls["secretLayout"]
    fractions = [value for value in (spec.get("cache", ".25"), spec.get("maxSQLMemory", ".25"))
                 if resource_rules.FRACTION.match(value)]
    if sum(Decimal(v[:-1]) / 100 if v.endswith("%") else Decimal(v) for v in fractions) > Decimal(
            "0.8"):
        spec["cache"] = ".25"
    if "storage" in spec and quantity.parse(spec["storage"].get("size", "10Gi")).value < \
            resource_rules.ONE_MI:
        spec["storage"]["size"] = "10Gi"  # below 1Mi is a unit left out (refused)
    resources = spec.get("resources", {})
    for section in ("requests", "limits"):
        memory = resources.get(section, {}).get("memory")
        if memory is not None and 0 < quantity.parse(memory).value < resource_rules.ONE_MI:
            resources[section]["memory"] = "1Gi"  # below 1Mi is a unit left out (refused)
    request = resources.get("requests", {}).get("memory")
    limit = resources.get("limits", {}).get("memory")
    if request is not None and limit is not None and \
            quantity.parse(request).value > quantity.parse(limit).value:
        resources["requests"]["memory"] = limit
    if "extraEnv" in spec:
        spec["extraEnv"] = _unique_by_name(spec["extraEnv"], "name")
    if "extraArgs" in spec:
        names: dict[str, str] = {}
        for arg in spec["extraArgs"]:
            names.setdefault(arg.split("=", 1)[0], arg)
        spec["extraArgs"] = list(names.values())
    security = spec.get("podSecurity", {})
    if security.get("runAsNonRoot", True) and security.get("runAsUser", 1000) == 0:
        security["runAsNonRoot"] = False  # root only through the documented escape hatch
    service = spec.get("service", {})
    if (spec.get("tls", {}).get("enabled", True) is False
            and service.get("type", "ClusterIP") != "ClusterIP"):
        service["allowInsecureExposure"] = True  # exposed insecure only with the risk accepted
    scheduling = spec.get("scheduling", {})
    if "topologySpread" in scheduling:
        pairs: dict[tuple[str, str], dict[str, Any]] = {}
        for item in scheduling["topologySpread"]:
            pairs.setdefault((item["topologyKey"], item.get("whenUnsatisfiable",
                                                            "DoNotSchedule")), item)
        scheduling["topologySpread"] = list(pairs.values())
    return spec


Path_ = tuple[str | int, ...]

OUT_OF_RANGE: list[tuple[Path_, int]] = [
    (("replicas",), 0), (("replicas",), 100), (("terminationGracePeriodSeconds",), 59),
    (("terminationGracePeriodSeconds",), 3601), (("failover", "maxCrashRestarts"), 21),
    (("failover", "maxCrashRestarts"), -1), (("podDisruptionBudget", "maxUnavailable"), 0),
    (("nodeTuning", "maxMapCount"), 65529), (("podSecurity", "runAsUser"), -1),
    (("podSecurity", "fsGroup"), 2**31), (("nodeTuning", "maxMapCount"), 2**31),
]

BAD_ENUMS: list[Path_] = [("startMode",), ("image", "pullPolicy"), ("scheduling", "antiAffinity"),
                          ("service", "type"), ("drift", "policy")]

BAD_PATTERNS: list[tuple[Path_, str]] = [
    (("version",), "v3.2.1"), (("version",), "3.2.1\n"), (("storage", "size"), "10GB"),
    (("storage", "size"), "10Gi\n"), (("failover", "nodeLostTimeout"), "5 minutes"),
    (("monitoring", "interval"), "30"), (("image", "repository"), "KWDB/kwdb"),
    # Kubernetes' own limits, expressed in the CRD so the API server enforces them too.
    (("image", "repository"), "kwdb/kwdb:3.2.1"), (("version",), "3.2.1-" + "a" * 123),
    (("labels", "tier"), "b c"), (("labels", "tier"), "x" * 64),
    (("scheduling", "nodeSelector", "disk"), "s" * 64),
    (("scheduling", "priorityClassName"), "p" * 254),
]
