"""Drift: what counts as a difference between a rendered object and its live copy, and how to
repair it.

Normalisation (normalise, schema, ignore, managed_fields), comparison (compare), repair by
server-side apply and field removal (repair), and the back-off for objects someone keeps changing
back (backoff). Imported by the controller; imports kube and the leaves, never kaiwudb.
"""
