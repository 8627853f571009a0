"""Fast stories about reconciler.controller: the pass and its conditions, on small fakes."""
