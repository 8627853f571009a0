"""KaiwuDB itself: the kwbase adapter, certificates, and the lifecycle and failover steps.

`kwbase` commands run over exec (kwbase); TLS material is made and checked with `cryptography`
(certs); the lifecycle (init, node bookkeeping, rolling updates, scale-in) and failover steps
decide what KaiwuDB needs from what the cluster shows (lifecycle, failover, loss). Imported by the
controller; imports kube and the leaves, never drift. A new KaiwuDB operation goes here.
"""
