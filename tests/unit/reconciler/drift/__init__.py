"""Unit tests of reconciler/drift/: comparison, ignore rules, back-off, removal patches."""
