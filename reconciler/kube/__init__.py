"""Talking to the Kubernetes API: the client, the kinds, the watch caches, the work queue, leader
election and Events.

Imported by every layer above (drift, kaiwudb, controller, runtime); imports only the leaves
(settings, metrics, keys, model, status) and the renderer's schema names.
"""
