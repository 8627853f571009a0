"""`python -m reconciler`: the same as `kaiwu reconcile` (see reconciler.cli)."""

from __future__ import annotations

import sys

from reconciler.cli import reconcile

sys.exit(reconcile(sys.argv[1:]))
