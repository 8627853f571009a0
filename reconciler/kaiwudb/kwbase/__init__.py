"""The KaiwuDB admin adapter: the one place that knows the `kwbase` command line.

Callers run commands through one entry point, `admin.KwbaseAdmin` (its settings:
`admin.KwbaseSettings`); the other modules hold what it sends and how it reads what comes back,
one concern each, imported directly (this package re-exports nothing):
- admin: KwbaseAdmin, running each command in a pod over exec.
- errors: the typed errors (ExecFailed, CommandFailed and its subclasses) and how a failure is
  classified.
- answers: kwbase's CSV output read as hostile data.
- sql: quoting, the one-statement check, SqlAnswer.
- nodes: `node status` and `node decommission` rows.
- replication: range health, raft snapshots, status record times, ranges without quorum.
- jobs: running jobs by type, and the jobs of one statement.
Every KWDB behaviour relied on is cited (file:line in V3.2.1) next to the code that relies on it.
"""
