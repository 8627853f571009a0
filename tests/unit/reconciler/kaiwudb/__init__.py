"""Unit tests of reconciler/kaiwudb/: certificates, the kwbase adapter (against the simulated
KaiwuDB in-process), failover decisions on small fakes. No test world."""
