"""Unit tests of reconciler/runtime/ and the image it ships in. No test world."""
