"""The validating admission webhook for KaiwuClusters: served over HTTPS by every replica, its
certificate and registration kept by the leader.

Started by `reconciler.runtime.process` when `Settings.webhook` is on. Two parts:
- `WebhookServer` answers POST /validate on `Settings.webhook_address` on EVERY replica (a
  standby too: the Service balances over all ready replicas, and a leader's death must not shut
  the door). Each answer is `reconciler.controller.admission.review`, computed from the request
  and this replica's watch caches (the stored cluster for a scale request, the StatefulSet's
  memory of the last applied spec): no API request in the common case, milliseconds.
- `WebhookManager`, a loop on every replica: reads the certificate Secret every
  `webhook_reload_s` and serves what it holds (a new certificate is served from the next TLS
  handshake, without a restart); on the leader it also moves the Secret on by one step of
  `reconciler.runtime.webhook_certs.next_step` (create, renew, rotate the CA with an overlap)
  and keeps the ValidatingWebhookConfiguration (`configuration`) registered with a caBundle
  holding every CA a replica may serve. With `webhook_cert_source=secret` the Secret is someone
  else's (cert-manager's) and only read.

The private key never touches a filesystem: it is handed to OpenSSL through an anonymous memory
file (memfd), so a read-only root filesystem needs no writable volume.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509

from reconciler.controller.admission import applied, judge, response, review
from reconciler.kube import kinds as k
from reconciler.kube.apiview import ApiView
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.kube.leader import NotLeaderError
from reconciler.listeners import BoundedHandler, Limits, TLSServer, tls_context
from reconciler.metrics import Metrics
from reconciler.model import Obj, meta
from reconciler.runtime.webhook_certs import (
    ServingPolicy,
    ca_bundle,
    next_step,
    read_state,
    secret_content,
    serving_pair,
)
from reconciler.settings import Settings
from renderer.schema import GROUP, PLURAL
from renderer.settings import KubeVersion

log = logging.getLogger(__name__)

PATH = "/validate"
WEBHOOK_NAME = f"{PLURAL}.{GROUP}"
# Namespaces labelled so are not checked: the escape hatch (reconciler.install labels its own).
SKIP_LABEL = "kaiwu.inspur.com/admission"
SKIP_VALUE = "skip"
LABELS = {"app.kubernetes.io/name": "kaiwu-reconciler", "app.kubernetes.io/part-of":
          "kaiwu-operator"}
# An AdmissionReview holds the object twice (object and oldObject); etcd caps one at 1.5 MiB.
# The API server sends its review at once: a client that stalls the TLS handshake or its
# request is dropped after 5 s, or sooner when a new connection needs its place.
LIMITS = Limits(max_connections=64, request_deadline_s=5.0, max_body_bytes=4 * 1024 * 1024,
                io_timeout_s=10.0)
# How often the certificate loop looks while nothing is served yet (a fresh install waits for
# the leader's CA), when webhook_reload_s is longer.
UNSERVED_RELOAD_S = 1.0
# Judged once when a decider is made: the schema's compiled gate is imported, and the validator
# that explains a refusal built (about half a second), on first use, so both happen then, not
# on a user's request. Its spec fails the schema, so that both run.
WARM_UP: Obj = {"apiVersion": f"{GROUP}/v1", "kind": "KaiwuCluster",
                "metadata": {"name": "warm-up", "namespace": "default"},
                "spec": {"replicas": "warm-up"}}


class WebhookServer:
    """HTTPS server answering AdmissionReviews with `decide`; `load` swaps its certificate."""

    def __init__(self, host: str, port: int, metrics: Metrics,
                 decide: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.metrics = metrics
        self.decide = decide
        self._context: ssl.SSLContext | None = None
        self.serving: tuple[bytes, bytes] | None = None
        self.not_after: datetime | None = None
        server = self

        class Handler(BoundedHandler):
            def do_POST(self) -> None:
                started = time.monotonic()
                if self.path.split("?", 1)[0] != PATH:
                    self._send(404, {"error": f"not found: POST {PATH}"})
                    return
                raw = self.read_body()  # refused past the body cap (reconciler.listeners)
                if not raw:
                    server.metrics.admission_reviews_total.labels(result="error").inc()
                    if raw is not None:
                        self._send(400, {"error": "an AdmissionReview body is required"})
                    return
                try:
                    body = json.loads(raw)
                    answer = server.decide(body)
                except Exception:  # the API server applies the failure policy to a 500
                    log.exception("admission review failed")
                    server.metrics.admission_reviews_total.labels(result="error").inc()
                    self._send(500, {"error": "the review could not be decided"})
                    return
                allowed = bool(answer["response"]["allowed"])
                server.metrics.admission_reviews_total.labels(
                    result="allowed" if allowed else "denied").inc()
                server.metrics.admission_duration_seconds.observe(time.monotonic() - started)
                self._send(200, answer)

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("webhook %s", format % args)

        self._httpd = TLSServer(
            (host, port), Handler, LIMITS, lambda: server._context, name="webhook",
            on_drop=lambda reason: metrics.http_connections_dropped_total.labels(
                listener="webhook", reason=reason).inc())
        self.port: int = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def load(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Serve this certificate from the next handshake on."""
        self._context = tls_context(cert_pem, key_pem)
        self.serving = (cert_pem, key_pem)
        self.not_after = x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc
        self.metrics.webhook_certificate_expiry_seconds.set(self.not_after.timestamp())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.1,),
                                        name="webhook", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def decider(view: CacheView, kube: Kube, settings: Settings,
            holds: Callable[[str, str], bool] = lambda _namespace, _name: True,
            ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """AdmissionReview -> answer, judged from this replica's caches (the stored cluster of a
    scale request is read from the API when the cache does not hold it yet, and so are the
    StatefulSet and pods of a cluster whose objects the caches do not hold, `holds`: another
    shard's, reconciler.kube.selection)."""

    def stored(namespace: str, name: str) -> Obj | None:
        found = view.get(k.KAIWU_CLUSTER, namespace, name)
        if found is None:
            try:
                found = kube.get(k.KAIWU_CLUSTER, namespace, name)
            except (ApiError, OSError) as error:
                log.warning("webhook could not read KaiwuCluster %s/%s: %s", namespace, name,
                            error)
        return found

    def accepted(cluster: Obj) -> dict[str, Any] | None:
        m = cluster.get("metadata") or {}
        if holds(str(m.get("namespace") or ""), str(m.get("name") or "")):
            return applied(view, cluster)
        try:
            return applied(ApiView(kube), cluster)
        except (ApiError, OSError) as error:
            log.warning("webhook could not read what exists of %s/%s: %s", m.get("namespace"),
                        m.get("name"), error)
            return None

    def watched(namespace: str) -> bool:
        return not settings.watch_namespace or namespace == settings.watch_namespace

    def neighbours(namespace: str) -> list[Obj]:
        return view.list(k.KAIWU_CLUSTER, namespace)

    def decide(body: dict[str, Any]) -> dict[str, Any]:
        verdict = review(body.get("request") or {}, stored=stored, accepted=accepted,
                         watched=watched, neighbours=neighbours)
        return response(body, verdict)

    judge(WARM_UP, None)  # builds the schema validator now
    return decide


def policy_of(settings: Settings, namespace: str) -> ServingPolicy:
    """What the serving certificate must cover: the Service in every DNS form, plus
    `webhook_hosts` (and the URL's host)."""
    service = settings.webhook_service
    hosts = [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local",
             f"{service}.{namespace}", service]
    hosts += [h.strip() for h in settings.webhook_hosts.split(",") if h.strip()]
    return ServingPolicy(
        # X.509 caps a common name at 64 characters; clients match the SANs, never the CN.
        common_name=service[:64], hosts=tuple(dict.fromkeys(hosts)),
        ca_validity=timedelta(seconds=settings.webhook_ca_validity_s),
        cert_validity=timedelta(seconds=settings.webhook_cert_validity_s),
        overlap=timedelta(seconds=settings.webhook_ca_overlap_s))


NAME_LABEL = "kubernetes.io/metadata.name"  # every namespace's own name, from Kubernetes 1.21


def configuration(settings: Settings, namespace: str, bundle: bytes,
                  kube_version: KubeVersion | None = None, *,
                  by_name: bool | None = None) -> Obj:
    """The ValidatingWebhookConfiguration: KaiwuCluster CREATE and UPDATE (the object and its
    scale subresource; status writes and deletes are never checked), every namespace but those
    labelled `kaiwu.inspur.com/admission: skip`; a namespaced install only its own namespace
    where namespaces carry their name as a label (NAME_LABEL). `by_name` says whether they do;
    None: from `kube_version` (1.21 on)."""
    client: Obj = ({"url": settings.webhook_url.rstrip("/") + PATH} if settings.webhook_url
                   else {"service": {"namespace": namespace, "name": settings.webhook_service,
                                     "path": PATH, "port": 443}})
    client["caBundle"] = base64.b64encode(bundle).decode()
    expressions: list[Obj] = [{"key": SKIP_LABEL, "operator": "NotIn", "values": [SKIP_VALUE]}]
    if by_name is None:
        by_name = kube_version is not None and (kube_version.major, kube_version.minor) >= (1, 21)
    if settings.watch_namespace and by_name:
        expressions.append({"key": NAME_LABEL, "operator": "In",
                            "values": [settings.watch_namespace]})
    webhook: Obj = {
        "name": WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": settings.webhook_failure_policy,
        "matchPolicy": "Equivalent",
        "timeoutSeconds": settings.webhook_timeout_s,
        "rules": [{"apiGroups": [GROUP], "apiVersions": ["*"],
                   "operations": ["CREATE", "UPDATE"],
                   "resources": [PLURAL, f"{PLURAL}/scale"], "scope": "Namespaced"}],
        "namespaceSelector": {"matchExpressions": expressions},
        "clientConfig": client,
    }
    return {
        "apiVersion": k.VALIDATING_WEBHOOK.api_version, "kind": k.VALIDATING_WEBHOOK.kind,
        "metadata": {"name": settings.effective_webhook_configuration(), "labels": dict(LABELS)},
        "webhooks": [webhook],
    }


def _shaped(live: Any, wanted: Any) -> Any:
    """`live` cut to the keys `wanted` has (the API server adds defaults we never set)."""
    if isinstance(wanted, dict) and isinstance(live, dict):
        return {key: _shaped(live.get(key), value) for key, value in wanted.items()}
    if isinstance(wanted, list) and isinstance(live, list) and len(wanted) == len(live):
        return [_shaped(item, shape) for item, shape in zip(live, wanted, strict=True)]
    return live


def differs(registered: Obj, desired: Obj) -> bool:
    """Whether the live registration differs from the desired one in anything the reconciler
    sets, the caBundle aside (compared on its own): someone's edit, a re-applied bundle's
    placeholder, or a changed setting."""
    def without_bundle(webhooks: Any) -> Any:
        return [{**w, "clientConfig": {key: value for key, value in
                                       (w.get("clientConfig") or {}).items()
                                       if key != "caBundle"}} for w in webhooks or ()]
    wanted = without_bundle(desired["webhooks"])
    live = without_bundle(registered.get("webhooks"))
    # A field we never set narrows or widens what is checked (an objectSelector or
    # matchConditions added by hand): only the API server's own empty objectSelector is not.
    added = any(key not in want and not (key == "objectSelector" and value == {})
                for have, want in zip(live, wanted, strict=False) for key, value in have.items())
    return added or bool(_shaped(live, wanted) != wanted)


# What the leader decides and writes into the registration, and the install bundle's copy
# therefore leaves out: its CA, and the settings --webhook-failure-policy and
# --webhook-timeout-s. The bundle claims nothing the leader sets to another value, so applying
# the bundle again (`kubectl apply --server-side`, a GitOps tool) never conflicts with the
# leader's write, nor undoes it.
SET_BY_THE_LEADER = ("failurePolicy", "timeoutSeconds")


def placeholder(settings: Settings, namespace: str, kube_version: KubeVersion) -> Obj:
    """The registration the install bundle ships: what the leader registers, less what the
    leader decides (its caBundle, failure policy and time-out). Created from the bundle, it has
    the API server's defaults there: failurePolicy Fail and no CA, so KaiwuCluster writes are
    refused (outside namespaces labelled to skip it) until the leader has put its CA in,
    seconds after its first replica starts."""
    found = configuration(settings, namespace, b"", kube_version)
    for webhook in found["webhooks"]:
        for key in SET_BY_THE_LEADER:
            webhook.pop(key, None)
        webhook["clientConfig"].pop("caBundle", None)
    return found


def _selects_by_name(config: Obj) -> bool:
    """Whether the registration's webhook selects namespaces by their name label."""
    for webhook in config.get("webhooks") or ():
        if isinstance(webhook, dict) and webhook.get("name") == WEBHOOK_NAME:
            selector = webhook.get("namespaceSelector") or {}
            return any(isinstance(e, dict) and e.get("key") == NAME_LABEL
                       for e in selector.get("matchExpressions") or ())
    return False


def live_bundle(config: Obj | None) -> bytes:
    """The caBundle the API server trusts now (b"" without a registration)."""
    for webhook in (config or {}).get("webhooks") or ():
        raw = (webhook.get("clientConfig") or {}).get("caBundle")
        if webhook.get("name") == WEBHOOK_NAME and raw:
            try:
                return base64.b64decode(raw)
            except ValueError:
                return b""
    return b""


class WebhookManager:
    """The certificate and registration loop (see the module docstring)."""

    def __init__(self, kube: Kube, settings: Settings, server: WebhookServer,
                 is_leader: Callable[[], bool], clock: Callable[[], datetime] = lambda:
                 datetime.now(UTC)) -> None:
        self.kube = kube
        self.settings = settings
        self.server = server
        self.is_leader = is_leader
        self.clock = clock
        self.namespace = settings.effective_lease_namespace()
        self.policy = policy_of(settings, self.namespace)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._kube_version: KubeVersion | None = None
        self.problem = ""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="webhook-certs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Look again now (leadership gained)."""
        self._wake.set()

    @property
    def alive(self) -> bool:
        return self._thread is None or self._thread.is_alive() or self._stop.is_set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
                self.problem = ""
            except (ApiError, OSError, NotLeaderError) as error:
                self.problem = f"webhook certificate: {error}"
                log.warning("webhook certificate loop: %s", error)
            except Exception as error:  # keep serving what is loaded; say why in /readyz
                self.problem = f"webhook certificate: {error}"
                log.exception("webhook certificate loop failed")
            # Quick while nothing is served yet, or the last look failed (a fresh install waits
            # for the leader's CA: a registration refused once is tried again within a second,
            # though the leader serves its certificate already).
            wait = self.settings.webhook_reload_s if self.server.serving and not self.problem \
                else min(UNSERVED_RELOAD_S, self.settings.webhook_reload_s)
            self._wake.wait(wait)
            self._wake.clear()

    def tick(self) -> None:
        """One look: (all) serve what the Secret holds; (leader) move the Secret on first, and
        register its CA once serving."""
        secret = self.kube.get(k.SECRET, self.namespace, self.settings.webhook_secret)
        if self.is_leader():
            self._lead(secret)
        else:
            self._serve(secret)

    def _serve(self, secret: Obj | None) -> None:
        """Serve the Secret's certificate from the next TLS handshake, if it is a new one."""
        pair = serving_pair(secret)
        if pair is not None and pair != self.server.serving:
            self.server.load(*pair)
            log.info("webhook serving certificate loaded", extra={
                "not_after": str(self.server.not_after)})

    def _lead(self, secret: Obj | None) -> None:
        name = self.settings.effective_webhook_configuration()
        registered = self.kube.get(k.VALIDATING_WEBHOOK, None, name)
        trusted = live_bundle(registered)
        if self.settings.webhook_cert_source == "reconciler":
            state = read_state(secret)
            step = next_step(state, trusted, self.clock(), self.policy)
            if step is not None:
                state, reason = step
                secret = self._write_secret(secret, state)
                log.info("webhook certificate: %s", reason)
            bundle = ca_bundle(state)
        else:
            bundle = ca_bundle(read_state(secret)) if secret is not None else b""
            if not bundle:
                raise OSError(f"Secret {self.namespace}/{self.settings.webhook_secret} has no "
                              "ca.crt yet (cert-manager issues it)")
        if self._kube_version is None:
            self._kube_version = KubeVersion.parse(self.kube.server_version())
        # This replica serves the certificate before the registration names its CA: the API
        # server calls the webhook as soon as it does, and a replica without a certificate
        # ends the handshake (failurePolicy Fail: the write is refused).
        self._serve(secret)
        # Whether a namespaced install selects its namespace by name is the install bundle's
        # choice (made for the Kubernetes `kaiwu install --kube-version` named), kept as the
        # registration holds it: decided again from the server, it would differ from the
        # bundle's after an upgrade of Kubernetes, and applying the bundle again would conflict
        # with this write (matchExpressions is one field to server-side apply).
        desired = configuration(self.settings, self.namespace, bundle, self._kube_version,
                                by_name=None if registered is None
                                else _selects_by_name(registered))
        if registered is None:
            # The install bundle ships the registration (without a caBundle): the
            # reconciler's rights are get and update of that one name. Made here
            # only where it may create (a development run with an administrator's rights).
            try:
                self.kube.create(desired)
            except ApiError as error:
                if error.forbidden:
                    raise OSError(f"ValidatingWebhookConfiguration {name} is missing: it comes "
                                  "with the install bundle (kaiwu install | kubectl apply -f -)"
                                  ) from error
                raise
        elif trusted != bundle or differs(registered, desired):
            # A whole replacement over the object read (a conflict: the next tick reads again),
            # so nothing of an older setting survives in the webhooks. The labels and
            # annotations others put on it stay (a GitOps tool's tracking marks): dropped, the
            # tool would see the bundle's object as changed and apply it again.
            live = meta(registered)
            desired["metadata"]["labels"] = {**(live.get("labels") or {}),
                                             **desired["metadata"]["labels"]}
            if live.get("annotations"):
                desired["metadata"]["annotations"] = dict(live["annotations"])
            desired["metadata"]["resourceVersion"] = live.get("resourceVersion")
            self.kube.replace(desired)
        else:
            return
        log.info("webhook registered", extra={"configuration": name,
                                              "cas": bundle.count(b"BEGIN CERTIFICATE")})

    def _write_secret(self, live: Obj | None, state: Any) -> Obj:
        data, annotations = secret_content(state)
        metadata: Obj = {"name": self.settings.webhook_secret, "namespace": self.namespace,
                         "labels": dict(LABELS), "annotations": annotations}
        body: Obj = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
                     "type": "kubernetes.io/tls", "data": data}
        if live is None:
            return self.kube.create(body)
        # A whole replacement (a key dropped from the data must go), and only over the Secret
        # we read: a conflict means another writer, and the next tick reads again.
        metadata["resourceVersion"] = meta(live).get("resourceVersion")
        return self.kube.replace(body)

