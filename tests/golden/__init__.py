"""Golden files: the whole rendered tree of every example cluster, checked byte for byte."""
