"""Stories: lost nodes, crash-looping pods and a crashing reconciler; the cluster is kept whole."""
