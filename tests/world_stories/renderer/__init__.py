"""Stories: the test world's real apiserver accepts what the renderer emits and accepts."""
