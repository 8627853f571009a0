"""`listed`: what the caches' selection thread does once the watches of the clusters' objects
have listed under its selector (reconciler.kube.selection), for tests that drive `Caches` by
hand (events handed to `_on_event`, stores filled directly) and start no thread."""

from __future__ import annotations

from reconciler.kube.cache import Caches


def listed(caches: Caches) -> None:
    """Select the cached clusters' names, take every selected informer's list as done under
    the new selector, and publish them, as the selection's thread would."""
    caches.selection.step()
    for informer in caches.selection.informers:
        informer.listed_selector = informer.label_selector
    caches.selection.step()
