"""Unit tests of reconciler/kube/: the work queue. No test world."""
