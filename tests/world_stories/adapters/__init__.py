"""Stories: the reconciler's certificate, kwbase and exec adapters against the test world."""
