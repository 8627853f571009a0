"""Stories: the reconciler process (caches, leader election, HTTP, CLI, source dir, deploy/)."""
