"""Every reason a pass gives and every action it records, as typed names in one place.

The controller's steps (reconciler.controller, reconciler.kaiwudb) write them into a `Pass`
(reconciler.model): `stalled`, `progressing` and `not_ready` hold (reason, message) pairs, and
`Pass.act` records an action for status.lastActions and an Event. The report step turns them
into conditions (reconciler.controller.conditions): the first stalled reason is the Stalled
condition's, the first progressing reason the Reconciling condition's, the first not-ready
reason the Ready condition's. Each list below is a `Literal` type on those fields, so mypy
refuses a reason or action that is not named here (a typo, or one a person would look up in
docs/reconciler.md and not find). CloudNativePG keeps its reasons and phases the same way.

Kept as plain strings (`Literal`, not an Enum): they go straight into status and Events, and a
test or a person compares them with the text they read there.

Beside them: the failover stages (`FailoverStage`, the keys of
reconciler.kaiwudb.failover.Failover.STAGES), the scale-in phases (`ScaleInPhase`, kept in
status.operation: reconciler.kaiwudb.scale), the `action` label of the lifecycle_actions_total
metric (`LifecycleMetric`, counted by reconciler.kaiwudb.context.StepContext.count), and
`Verdict`, what a guard of the failover and scale-in steps answers: `GO`, or a `Wait` with the
Ready reason and the words to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

StalledReason = Literal[
    "InvalidSpec",              # the spec breaks a rule (renderer): nothing is applied
    "VersionChangeRefused",     # a downgrade or a major upgrade in place
    "NameTaken",                # another cluster of the namespace needs one of its names
    "SecretNotMarked",          # a user's certificate Secret without the TLS label
    "CertificatesUnusable",     # certificates that cannot be used or repaired by us
    "ApplyRejected",            # the API server refuses an object as rendered
    "ImmutableField",           # a StatefulSet change that needs a person
    "DriftFight",               # someone keeps changing an object back
    "ScaleInRefused",           # a scale-in KaiwuDB cannot take
    "LongGoneNodes",            # nodes gone too long for KaiwuDB to take back
    "StrayNodeNotRemovable",    # a node with no pod of the cluster that cannot be removed
    "RestoreFailed",            # spec.bootstrap.fromBackup failed
    "RestoreRefused",           # a restore into a cluster that holds data
    "CrashLoop",                # a pod restarted past failover.maxCrashRestarts
    "StoreReplaced",            # a store replaced while ranges have no quorum elsewhere
]
"""Why the cluster cannot go on without a person: the Stalled condition's reasons."""

ProgressingReason = Literal[
    "Recreating",               # a StatefulSet deleted with its pods orphaned, made again
    "ScalingIn",                # nodes being decommissioned
    "ScaleInWaiting",           # a scale-in waiting for KaiwuDB (replicas moving)
    "Upgrading",                # pods rolled one at a time onto a new version
    "Restoring",                # IMPORTs from a backup under way
    "BackupRunning",            # a backup exporting
]
"""What the reconciler is doing: the Reconciling condition's reasons."""

NotReadyReason = Literal[
    "WaitingForPods",           # pods not scheduled, started or ready yet
    "WaitingForInit",           # the first node not initialised yet
    "NodesJoining",             # nodes started but not members yet
    "NodesNotLive",             # members KaiwuDB does not report live
    "NodesWithoutPods",         # members whose pod is gone
    "NodesReplaced",            # dead node ids of replaced stores, to decommission
    "StrayNodes",               # members with no pod of the cluster
    "StartFlags",               # the start-flags ConfigMap not written yet
    "NodeStatusUnknown",        # `kwbase node status` failed: retried
    "NodesDecommissioning",     # a decommission command failed: retried
    "LongGoneNodes",            # removing nodes gone too long failed: retried
    "ScalingIn",
    "ScaleInWaiting",
    "Upgrading",
    "Restoring",
    "BackupRunning",
    "FailoverWaiting",          # a failover step waiting for its guard (a timeout, quorum)
    "Replacing",                # a failover step under way
    "NodeLost",                 # a pod on a Kubernetes node that is gone
    "VolumeOnLostNode",         # a volume pinned to a node that is gone
    "CrashLoop",
]
"""Why the cluster is not Ready although nothing needs a person: the Ready condition's."""

ActionName = Literal[
    "Created", "Applied", "DriftRepaired", "Recreating", "Pruned",
    "CertificateWritten", "SecretKept", "VolumeExpanding",
    "Initialized", "Decommissioning", "NodeDecommissioned", "ScaledIn", "Recommissioned",
    "ScaleInCancelled",
    "DeadNodeDecommissioned", "LongGoneNodeDecommissioned", "StrayNodeDecommissioned",
    "Upgrading", "NodeUpgrading", "UpgradeCompleting",
    "PodForceDeleted", "ClaimDeleted", "VolumeReplaced", "CrashLoopRestarted",
]
"""What a pass did, as status.lastActions and Events name it."""

FailoverStage = Literal["NodeLost", "VolumeOnLostNode", "ClaimGone", "StoreReplaced", "CrashLoop"]
"""What a pod of the cluster shows to the failover step (reconciler.kaiwudb.failover, whose
module docstring says what each means and the step each gets). Final names, so mypy keeps their
Literal types: the first two, StoreReplaced and CrashLoop are reasons too."""

NODE_LOST: Final = "NodeLost"
VOLUME_ON_LOST_NODE: Final = "VolumeOnLostNode"
CLAIM_GONE: Final = "ClaimGone"
STORE_REPLACED: Final = "StoreReplaced"
CRASH_LOOP: Final = "CrashLoop"


ScaleInPhase = Literal["Decommissioning", "Removing"]
"""Where a scale-in is (status.operation.phase; reconciler.kaiwudb.scale says what each does)."""

DECOMMISSIONING: Final = "Decommissioning"
REMOVING: Final = "Removing"

LifecycleMetric = Literal[
    "init", "decommission", "scale-in-step", "delete-claim", "recommission",
    "force-delete-removed-pod", "decommission-long-gone-node", "decommission-stray-node",
    "upgrade-step", "node-upgrade", "upgrade-complete-restart",
    "decommission-dead-node", "force-delete-pod", "replace-volume", "restart-crashing-pod",
    "backup-start",
]
"""The `action` label of lifecycle_actions_total: one value per kind of act on KaiwuDB or its
pods (docs/metrics.md points here)."""


@dataclass(frozen=True)
class Go:
    """A guard lets a step go ahead now."""


@dataclass(frozen=True)
class Wait:
    """A guard holds a step back: why (a Ready reason) and what it waits for, in words."""

    reason: NotReadyReason
    message: str


GO: Final = Go()
Verdict = Go | Wait
"""What a guard decides (failover's and scale-in's): `GO`, or a `Wait` saying why not."""
