"""TLS certificates for secure KaiwuDB clusters: issue, check, renew, and plan the Secrets.

The controller's certificates step (reconciler.controller.certificates) calls
`rotation.certs_action` once per reconcile of a cluster with `spec.tls.enabled`; the restore file
server and the webhook's own certificates issue with `authority` and `leaves`. Everything is done
in-process with the `cryptography` package, never by shelling out to `kwbase cert` or openssl.
Files and their contents follow what `kwbase cert create-ca | create-node | create-client`
produce (see kaiwudb-facts.md "Certificates"): RSA 2048 keys in PKCS#1 PEM, a CA valid for 10
years, node and root client certificates valid for 5 years; the node certificate has CN `node`
and both server and client usage (kwbase uses it for node-to-node connections in both
directions), the root client certificate has CN `root` and client usage.

One module per concern, each imported directly (this package re-exports nothing):
- keys: certificates and keys in memory (CertSettings, CertKey, the loaded-key cache) and what a
  certificate says as KWDB reads it (principals, SANs, usages, issuer).
- authority: the CA: made, named, renewed with the same key.
- leaves: node, client and serving certificates signed by a CA.
- layout: which Secrets, which keys, their bodies, reading them back, the certs hash.
- user_secrets: checks of the Secrets a user provides, and CertProblem.
- rotation: the plan the controller carries out (certs_action, CertsPlan): create, reissue,
  renew, refresh.
"""
