"""The simulator's self-tests: the test world behaves like the real thing.

test_kwdb.py (the simulated KaiwuDB, in-process) and test_controlplane_build.py need nothing
built; test_controlplane.py and test_kubelet.py need the test world (`make world`).
"""
