"""Unit tests of reconciler/ (leaf modules here, packages in subfolders). No test world."""
