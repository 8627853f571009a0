"""What the renderer's tests share: write KaiwuCluster files, run `kaiwu`, check what comes out.

Used by tests/unit/renderer/, tests/world_stories/renderer/ and tests/golden/. The
checks here are independent of the renderer's own code: objects are validated with
kubernetes-validate (the upstream OpenAPI schemas, strict mode) plus the API server's name and
label rules written out below from the Kubernetes validation code, and error lines are located
with PyYAML, a different parser than the renderer's ruamel.yaml.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml
from ruamel.yaml import YAML

from renderer import cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "clusters"
KUSTOMIZATION = "kustomization.yaml"
API_VERSION = "kaiwu.inspur.com/v1"
KIND = "KaiwuCluster"
# The only kind kubernetes-validate cannot know: it comes from the prometheus-operator's CRDs.
FOREIGN_KINDS = frozenset({"ServiceMonitor"})
NEWEST_VALIDATABLE = ".".join(kubernetes_validate.latest_version().split(".")[:2])

# `file:line: path: message (fix)`; a YAML syntax error has no spec path.
PROBLEM_LINE = re.compile(
    r"^(?P<file>.+?):(?P<line>[0-9]+): (?:(?P<path>[A-Za-z0-9_.\[\]/-]+): )?"
    r"(?P<message>.+) \((?P<fix>[^()]*(?:\([^()]*\)[^()]*)*)\)$")
SUMMARY_LINE = re.compile(r"^kaiwu (render|validate|diff): [0-9]+ problem\(s\), nothing written$")


@dataclass(frozen=True)
class Run:
    """The outcome of one `kaiwu` invocation."""

    code: int
    stdout: str
    stderr: str

    @property
    def problems(self) -> list[re.Match[str]]:
        """The `file:line: path: message (fix)` lines of stderr (the summary line excluded)."""
        return [match for line in self.stderr.splitlines()
                if (match := PROBLEM_LINE.match(line)) is not None]


def kaiwu(*args: str | Path) -> Run:
    """Run the CLI in this process (fast: for the many runs of property tests)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(arg) for arg in args])
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 2
    return Run(code, out.getvalue(), err.getvalue())


def kaiwu_process(*args: str | Path, cwd: Path | None = None,
                  env: Mapping[str, str] | None = None) -> Run:
    """Run the installed `kaiwu` console script in a fresh process, as a user does."""
    script = Path(sys.executable).parent / "kaiwu"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "renderer.cli"]
    # The venv's editable install may point at another checkout (a git worktree shares it):
    # put this one first, so the process runs the code under test.
    run_env = dict(os.environ if env is None else env)
    run_env["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(REPO), run_env.get("PYTHONPATH", "")) if part)
    # Under mutation testing (bench/mutation.py) mutmut first records which test reaches which
    # function ("stats"), reading its settings from the working directory: a child started
    # elsewhere cannot, so it runs the plain code then. A mutant's name is passed on as is.
    if run_env.get("MUTANT_UNDER_TEST") == "stats":
        del run_env["MUTANT_UNDER_TEST"]
    result = subprocess.run([*command, *(str(arg) for arg in args)], cwd=cwd, env=run_env,
                            capture_output=True, text=True, timeout=120, check=False)
    return Run(result.returncode, result.stdout, result.stderr)


def cluster(name: str, namespace: str | None = "default", **spec: Any) -> dict[str, Any]:
    """A KaiwuCluster manifest as a user writes it (only the fields given)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def to_text(*documents: Any) -> str:
    """YAML text of one or more documents, in the key order given, block style.

    Dumped by ruamel.yaml with YAML 1.2 quoting, which the renderer reads back as written:
    PyYAML (YAML 1.1) would leave `1e3` unquoted, and YAML 1.2 reads that as a float."""
    dumper = YAML(typ="safe", pure=True)
    dumper.default_flow_style = False
    dumper.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    dumper.width = 4096
    dumper.allow_unicode = True
    stream = io.StringIO()
    dumper.dump_all(list(documents), stream)
    return stream.getvalue()


def write_yaml(path: Path, *documents: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_text(*documents), encoding="utf-8")
    return path


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` by relative POSIX path, with its exact bytes."""
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def rendered_objects(root: Path) -> dict[str, dict[str, Any]]:
    """The Kubernetes objects of a rendered tree by relative path (kustomization.yaml aside)."""
    objects = {}
    for name, data in read_tree(root).items():
        if name == KUSTOMIZATION:
            continue
        loaded = yaml.safe_load(data)
        assert isinstance(loaded, dict), f"{name} is not one YAML mapping"
        objects[name] = loaded
    return objects


def render_tree(source: Path, out: Path, *options: str) -> dict[str, dict[str, Any]]:
    """`kaiwu render SOURCE -o OUT [options]`, asserting success; the objects written."""
    run = kaiwu("render", source, "-o", out, *options)
    assert run.code == 0, run.stderr
    return rendered_objects(out)


@dataclass(frozen=True)
class Validation:
    """kubernetes-validate's verdict on a set of objects for one Kubernetes version."""

    errors: tuple[str, ...]
    skipped_kinds: frozenset[str]


def validate_strict(objects: Mapping[str, dict[str, Any]], kube_version: str) -> Validation:
    """Validate every object against the upstream schemas in strict mode (unknown fields are
    errors); kinds without a schema are collected, not silently passed."""
    errors, skipped = [], set()
    for name, obj in sorted(objects.items()):
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            skipped.add(obj["kind"])
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(part) for part in error.path)
            errors.append(f"{name}: {where}: {error.message}")
    errors += [f"{name}: {problem}" for name, obj in sorted(objects.items())
               for problem in api_server_rules(obj)]
    return Validation(tuple(errors), frozenset(skipped))


# The API server's own rules that the OpenAPI schemas do not carry (k8s.io/apimachinery
# validation: IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label, IsQualifiedName,
# IsValidLabelValue, IsValidPortName, IsEnvVarName). Whole-string matches: a trailing newline is
# not a name.
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


def _is_qualified_name(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in key and not (0 < len(prefix) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _QUALIFIED_NAME_PART.fullmatch(name) is not None


def _label_problems(where: str, labels: Any) -> Iterator[str]:
    for key, value in (labels or {}).items():
        if not _is_qualified_name(key):
            yield f"{where}: label key {key!r} is not a qualified name"
        if not (len(value) <= 63 and _LABEL_VALUE.fullmatch(value)):
            yield f"{where}: label value {value!r} is not valid"


def api_server_rules(obj: dict[str, Any]) -> list[str]:
    """Name, label, port and env rules the API server enforces beyond the OpenAPI schema."""
    problems = []
    meta = obj["metadata"]
    name_rule = _DNS1035_LABEL if obj["kind"] == "Service" else _DNS1123_SUBDOMAIN
    limit = 63 if obj["kind"] == "Service" else 253
    if not (len(meta["name"]) <= limit and name_rule.fullmatch(meta["name"])):
        problems.append(f"metadata.name {meta['name']!r} is not a valid {obj['kind']} name")
    if not (len(meta["namespace"]) <= 63 and _DNS1123_LABEL.fullmatch(meta["namespace"])):
        problems.append(f"metadata.namespace {meta['namespace']!r} is not a namespace name")
    problems += _label_problems("metadata.labels", meta.get("labels"))
    problems += [f"metadata.annotations: key {key!r} is not a qualified name"
                 for key in meta.get("annotations", {}) if not _is_qualified_name(key)]
    if obj["kind"] == "StatefulSet":
        # Pods get "<name>-<ordinal>" and controller-revision-hash "<name>-<10 chars>" (label).
        if len(meta["name"]) + 11 > 63:
            problems.append("StatefulSet name too long for its controller-revision-hash label")
        template = obj["spec"]["template"]
        problems += _label_problems("template.labels", template["metadata"].get("labels"))
        pod = template["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            if not _DNS1123_LABEL.fullmatch(container["name"]):
                problems.append(f"container name {container['name']!r} is not valid")
            for port in container.get("ports", []):
                if not (len(port["name"]) <= 15 and _PORT_NAME.fullmatch(port["name"])
                        and re.search("[a-z]", port["name"])):
                    problems.append(f"port name {port['name']!r} is not valid")
            for env in container.get("env", []):
                if not _ENV_NAME.fullmatch(env["name"]):
                    problems.append(f"env name {env['name']!r} is not valid")
            for flag in container.get("command", []):
                if "\n" in flag or "\x00" in flag:
                    problems.append(f"command argument {flag!r} has a line break or NUL")
            problems += _resource_problems(container.get("resources", {}))
            for env in container.get("env", []):
                key = env.get("valueFrom", {}).get("secretKeyRef", {}).get("key")
                if key is not None and not (_CONFIG_KEY.fullmatch(key)
                                            and not key.startswith("..")):
                    problems.append(f"secretKeyRef key {key!r} is not valid")
        problems += _toleration_problems(pod.get("tolerations", []))
        pairs = [(c["topologyKey"], c["whenUnsatisfiable"])
                 for c in pod.get("topologySpreadConstraints", [])]
        if len(pairs) != len(set(pairs)):
            problems.append(f"duplicate topology spread constraints {pairs}")
        for claim in obj["spec"]["volumeClaimTemplates"]:
            pvc = f"{claim['metadata']['name']}-{meta['name']}-99"
            if not (len(pvc) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(pvc)):
                problems.append(f"claim name {pvc!r} is not valid")
    return problems


_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def _toleration_problems(tolerations: list[dict[str, Any]]) -> Iterator[str]:
    """core/v1 ValidateTolerations."""
    for toleration in tolerations:
        key, value = toleration.get("key", ""), toleration.get("value", "")
        exists = toleration.get("operator") == "Exists"
        if key and not _is_qualified_name(key):
            yield f"toleration key {key!r} is not a qualified name"
        if not key and not exists:
            yield "a toleration without a key needs operator Exists"
        if "tolerationSeconds" in toleration and toleration.get("effect") != "NoExecute":
            yield "tolerationSeconds needs effect NoExecute"
        if exists and value:
            yield "operator Exists takes no value"
        if not exists and not (len(value) <= 63 and _LABEL_VALUE.fullmatch(value)):
            yield f"toleration value {value!r} is not a label value"


def _resource_problems(resources: dict[str, Any]) -> Iterator[str]:
    """core/v1 ValidateResourceRequirements for a container (quantities already canonical)."""
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    for name, value in {**requests, **limits}.items():
        standard = name in ("cpu", "memory", "ephemeral-storage") or name.startswith("hugepages-")
        if not (_is_qualified_name(name) and ("/" in name or standard)):
            yield f"{name!r} is not a container resource"
        if str(value).startswith("-"):
            yield f"{name} {value} is negative"
    for name in requests:
        extended = "/" in name and "kubernetes.io/" not in name
        if extended and requests[name] != limits.get(name):
            yield f"extended resource {name} needs limit == request"


def line_of(text: str, document: int, path: Sequence[str | int]) -> int:
    """The 1-based line the renderer should blame for `path` in document `document` of `text`:
    the deepest node of the path that exists (a mapping key's line, a sequence item's line).

    Uses PyYAML's composer, independent of the renderer's ruamel.yaml line tracking."""
    nodes = [node for node in yaml.compose_all(text) if node is not None]
    node = nodes[document]
    line = node.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            found = [(key, value) for key, value in node.value if key.value == part]
            if not found:
                break
            key_node, node = found[0]
            line = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) \
                and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def dotted(path: Sequence[str | int]) -> str:
    """A spec path as error lines print it: `spec.extraEnv[0].name`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def clean_env(home: Path) -> dict[str, str]:
    """An environment for subprocesses that sees no user git configuration."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GIT_", "PYTHONHASHSEED"))}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="Kai Wu",
               GIT_AUTHOR_EMAIL="kai@example.invalid", GIT_COMMITTER_NAME="Kai Wu",
               GIT_COMMITTER_EMAIL="kai@example.invalid")
    return env
