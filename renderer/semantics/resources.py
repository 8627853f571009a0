"""What a spec asks of memory, CPU, devices and storage: kwbase's cache and SQL memory as
fractions or sizes (and what kwbase makes of a fraction), container resources as the API server
accepts them, and a store volume of a real size.

Called by renderer.semantics (check), and for FRACTION by renderer.builders.statefulset.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from renderer import quantity
from renderer.semantics.names import is_qualified_name
from renderer.semantics.violation import Path, Violation

FRACTION = re.compile(r"^(0?\.[0-9]+|[0-9]+(\.[0-9]+)?%)\Z")
# Sizes below one mebibyte are a unit left out ("storage.size: 10" is 10 bytes), never meant.
ONE_MI = 1024 * 1024
# The time-series engine allocates well beyond --cache and --max-sql-memory (kaiwudb-facts.md).
MAX_MEMORY_FRACTION = Decimal("0.8")


def kwbase_percent(text: str) -> int:
    """The whole percent kwbase makes of a FRACTION (cli/flags_util.go bytesOrPercentageValue):
    strconv.ParseFloat(s, 32), times 100 for `.25` or 1 for `25%`, truncated. A float32 .01 is
    0.0099999998, so `.01` is 0%: kwbase accepts only 1..99."""
    number, multiplier = (text[:-1], 1.0) if text.endswith("%") else (text, 100.0)
    as_float32: float = struct.unpack("f", struct.pack("f", float(number)))[0]
    return int(as_float32 * multiplier)


def check_memory(spec: dict[str, Any]) -> Iterator[Violation]:
    """spec.cache and spec.maxSQLMemory: fractions kwbase accepts or positive sizes, the
    fractions leaving the time-series engine its share."""
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


def check_resources(spec: dict[str, Any]) -> Iterator[Violation]:
    """Container resources as the API server accepts them, and a store volume of a real size."""
    resources = spec["resources"]
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    for section, values in (("requests", requests), ("limits", limits)):
        for name in values:
            path: Path = ("spec", "resources", section, name)
            if not is_container_resource(name):
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
            elif is_extended_resource(name) and value != value.to_integral_value():
                yield Violation(path, f"{values[name]} is not a whole number",
                                f"{name} is counted in whole devices")
    for name in sorted(set(requests) | set(limits)):
        try:
            request = quantity.parse(requests[name]) if name in requests else None
            limit = quantity.parse(limits[name]) if name in limits else None
        except quantity.QuantityError:
            continue  # reported above
        extended = is_extended_resource(name)
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


def is_container_resource(name: str) -> bool:
    """What the API server accepts in a container's resources (validateContainerResourceName):
    the standard names, hugepages-<size>, or a qualified name with a domain prefix."""
    if "/" not in name:
        return name in ("cpu", "memory", "ephemeral-storage") or (
            name.startswith("hugepages-") and is_qualified_name(name))
    return is_qualified_name(name)


def is_extended_resource(name: str) -> bool:
    """A device or other extended resource: domain-prefixed, outside kubernetes.io."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")
