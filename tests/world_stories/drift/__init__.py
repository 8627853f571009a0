"""Stories: drift on a real apiserver is detected, reported, repaired or left alone as told."""
