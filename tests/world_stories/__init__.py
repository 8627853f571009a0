"""The world tier: stories that need the test world (tests/world/: a real kube-apiserver built by
`make world`, simulated nodes and KaiwuDB). Each story uses the `control_plane`, `kube`,
`namespace`, `sim_world` or `faults` fixture and is marked `world`; `pytest tests/world_stories`
runs them all (minutes, two cores), `pytest tests/world_stories/drift` one area.

renderer/ (the apiserver agrees with the renderer), drift/ (drift detection and repair), lifecycle/
(init, scale, drain, upgrade, certificates), failover/ (lost nodes, crash loops, a crashing
reconciler), runtime/ (the reconciler process: caches, leader election, HTTP, deploy/), adapters/
(the certificate, kwbase and exec adapters against real objects).
"""
