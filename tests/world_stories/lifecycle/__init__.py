"""Stories: a KaiwuCluster is initialised, scaled, drained, upgraded and given certificates."""
