"""Backups and restores of a KaiwuDB cluster (docs/backup.md): the "backup" and "restore" steps
of a cluster's pass, the decisions they make, where the files go and how KaiwuDB reads them
back. Nothing is imported here: each module says what it does and who calls it.
"""
