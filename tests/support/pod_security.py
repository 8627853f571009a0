"""The Pod Security Standards' "baseline" and "restricted" rules, as a checker of pod templates.

A namespace labelled `pod-security.kubernetes.io/enforce: restricted` admits a pod only if it
passes every rule below; "baseline" is the floor of any namespace. The rules are written out
from the Kubernetes documentation (concepts/security/pod-security-standards, the v1.25+
definitions), each with the fields it reads, so a change that loosens one fails a unit test
instead of an admission in somebody's cluster:

baseline
- HostProcess: spec.securityContext.windowsOptions.hostProcess and the containers' own: unset
  or false.
- Host namespaces: spec.hostNetwork, spec.hostPID, spec.hostIPC: unset or false.
- Privileged containers: containers[*].securityContext.privileged: unset or false.
- Capabilities: containers[*].securityContext.capabilities.add: only BASELINE_CAPABILITIES.
- HostPath volumes: spec.volumes[*].hostPath: unset.
- Host ports: containers[*].ports[*].hostPort: unset or 0.
- AppArmor: spec.securityContext.appArmorProfile.type and the containers' own: unset,
  RuntimeDefault or Localhost; the annotations container.apparmor.security.beta.kubernetes.io/*:
  runtime/default or localhost/*.
- SELinux: seLinuxOptions.type (pod and containers) in SELINUX_TYPES; .user and .role unset.
- /proc mount type: containers[*].securityContext.procMount: unset or Default.
- Seccomp: seccompProfile.type (pod and containers): not Unconfined.
- Sysctls: spec.securityContext.sysctls[*].name: only SAFE_SYSCTLS.

restricted (everything in baseline, and)
- Volume types: spec.volumes[*]: only RESTRICTED_VOLUMES.
- Privilege escalation: containers[*].securityContext.allowPrivilegeEscalation: false, set.
- Running as non-root: containers[*].securityContext.runAsNonRoot true, or unset with
  spec.securityContext.runAsNonRoot true.
- Running as non-root user: spec.securityContext.runAsUser and the containers': not 0.
- Seccomp: containers[*].securityContext.seccompProfile.type RuntimeDefault or Localhost, or
  unset with the pod's so.
- Capabilities: containers[*].securityContext.capabilities.drop includes ALL; .add only
  NET_BIND_SERVICE.

"Containers" is every container of spec.initContainers, spec.containers and
spec.ephemeralContainers. Used by tests/unit/renderer/test_pod_security.py (KaiwuDB's pods) and
tests/unit/reconciler/test_install.py (the reconciler's own, in every bundle variant).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Baseline: capabilities a container may add beyond the runtime's defaults.
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
# Baseline: the namespaced sysctls considered safe.
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
# Restricted: the only volume types allowed (a StatefulSet's claim is a PVC volume).
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret"})
SECCOMP_OK = frozenset({"RuntimeDefault", "Localhost"})


def containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(field, [])


def baseline_violations(template: dict[str, Any]) -> list[str]:
    """Each baseline rule the pod template breaks, as '<container or pod>: <rule>'."""
    pod, annotations = template["spec"], template.get("metadata", {}).get("annotations", {})
    found: list[str] = []
    found += [f"pod: {field}" for field in ("hostNetwork", "hostPID", "hostIPC")
              if pod.get(field)]
    found += [f"pod: hostPath volume {volume['name']}" for volume in pod.get("volumes", [])
              if "hostPath" in volume]
    pod_context = pod.get("securityContext", {})
    found += [f"pod: sysctl {item['name']}" for item in pod_context.get("sysctls", [])
              if item["name"] not in SAFE_SYSCTLS]
    found += _context_rules("pod", pod_context)
    found += [f"pod: AppArmor {key}" for key, value in annotations.items()
              if key.startswith("container.apparmor.security.beta.kubernetes.io/")
              and value != "runtime/default" and not value.startswith("localhost/")]
    for container in containers(pod):
        name, context = container["name"], container.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        added = set(context.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES
        found += [f"{name}: adds capability {cap}" for cap in sorted(added)]
        found += [f"{name}: hostPort {port['hostPort']}" for port in container.get("ports", [])
                  if port.get("hostPort")]
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount")
        found += _context_rules(name, context)
    return found


def _context_rules(where: str, context: dict[str, Any]) -> list[str]:
    """The baseline rules a pod's and a container's securityContext share."""
    found = []
    if context.get("windowsOptions", {}).get("hostProcess"):
        found.append(f"{where}: windows hostProcess")
    selinux = context.get("seLinuxOptions", {})
    if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
        found.append(f"{where}: seLinuxOptions")
    if context.get("seccompProfile", {}).get("type") == "Unconfined":
        found.append(f"{where}: seccomp Unconfined")
    if "appArmorProfile" in context and \
            context["appArmorProfile"].get("type") not in APPARMOR_TYPES:
        found.append(f"{where}: appArmorProfile")
    return found


def restricted_violations(template: dict[str, Any]) -> list[str]:
    """Each restricted rule (beyond baseline) the pod template breaks."""
    pod = template["spec"]
    pod_context = pod.get("securityContext", {})
    found: list[str] = []
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        found += [f"pod: volume type {kind}" for kind in sorted(kinds - RESTRICTED_VOLUMES)]
    if pod_context.get("runAsUser") == 0:
        found.append("pod: runAsUser 0")
    for container in containers(pod):
        name, context = container["name"], container.get("securityContext", {})
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation not false")
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot not true")
        if context.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {}))
        if seccomp.get("type") not in SECCOMP_OK:
            found.append(f"{name}: seccompProfile not RuntimeDefault or Localhost")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities do not drop ALL")
        found += [f"{name}: adds capability {cap}" for cap in capabilities.get("add", [])
                  if cap != "NET_BIND_SERVICE"]
    return found
