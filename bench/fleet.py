"""The fleet every benchmark measures: N KaiwuCluster specs, deterministic, varied the way a
platform team's clusters vary (dev, production-style TLS spread over zones, single node; sizes,
replica counts, namespaces shared by several clusters).

Used by the scripts in bench/ (render, diff, resync CPU, cache memory, repair latency) and by the
fleet stories, so every figure is measured on the same fleet. `fleet_specs(1000)` is the issue's
"1,000 generated clusters".
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ("dev.yaml", "production.yaml", "single-node.yaml")
NAMESPACES = 50


def _templates() -> list[dict[str, Any]]:
    yaml = YAML(typ="safe", pure=True)
    return [yaml.load((ROOT / "clusters" / name).read_text()) for name in TEMPLATES]


def fleet_specs(count: int) -> list[dict[str, Any]]:
    """`count` KaiwuCluster objects as a user would commit them: cluster i is named
    `fleet-<i>` in namespace `team-<i mod 50>`, shaped after one of the example clusters, with
    its replica count and volume size varied (multi-replica clusters keep at least 3 nodes)."""
    templates = _templates()
    fleet = []
    for index in range(count):
        spec_source = templates[index % len(templates)]
        obj = copy.deepcopy(spec_source)
        obj["metadata"] = {"name": f"fleet-{index:04d}",
                           "namespace": f"team-{index % NAMESPACES:02d}"}
        spec = obj["spec"]
        if spec.get("startMode", "multi-replica") == "multi-replica":
            spec["replicas"] = 3 + index % 5
        spec["storage"]["size"] = f"{10 + index % 90}Gi"
        spec.setdefault("labels", {})["fleet-index"] = str(index)
        fleet.append(obj)
    return fleet


def write_fleet(directory: Path, count: int) -> list[Path]:
    """The fleet as files, one cluster per file (`<namespace>/<name>.yaml`), as a git
    repository of cluster specs holds it; returns the paths written."""
    yaml = YAML()
    yaml.default_flow_style = False
    paths = []
    for obj in fleet_specs(count):
        path = directory / obj["metadata"]["namespace"] / f"{obj['metadata']['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as out:
            yaml.dump(obj, out)
        paths.append(path)
    return paths
