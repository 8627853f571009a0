"""The running process: wiring the caches, queue, workers, leader election and HTTP endpoints
around the controller, and the directory source (KaiwuCluster files from a git checkout).

Imported by the CLI only; imports everything below it.
"""
