"""The controller: one reconcile pass over one KaiwuCluster, as an ordered list of named steps.

Imported by the runtime; imports drift, kaiwudb, kube and the leaves.
"""
