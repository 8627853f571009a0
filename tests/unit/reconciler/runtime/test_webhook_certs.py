"""Stories about the webhook's serving certificate over time (reconciler.runtime.webhook_certs),
on a fake clock: the leader moves the Secret on one step per tick and registers the caBundle,
two replicas reload the Secret at their own pace, and at every moment the API server must trust
what each of them serves. Three CA lifetimes pass in a second.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from reconciler.runtime.webhook_certs import (
    ServingPolicy,
    ServingState,
    bundle_fingerprints,
    ca_bundle,
    next_step,
    read_state,
    secret_content,
    serving_pair,
)

START = datetime(2030, 1, 1, tzinfo=UTC)
POLICY = ServingPolicy(common_name="kaiwu-reconciler-webhook.kaiwu-system.svc",
                       hosts=("kaiwu-reconciler-webhook.kaiwu-system.svc", "127.0.0.1"),
                       ca_validity=timedelta(seconds=600), cert_validity=timedelta(seconds=200),
                       overlap=timedelta(seconds=40), key_size=1024)
TICK = timedelta(seconds=10)


def as_secret(state: ServingState) -> dict[str, object]:
    data, annotations = secret_content(state)
    return {"metadata": {"name": "tls", "annotations": annotations}, "data": data}


@dataclass
class World:
    """The Secret, the registered caBundle, and what each replica serves. The Secret is kept
    parsed (its parsing is its own story below): a tick costs what the leader's step costs."""

    state: ServingState = field(default_factory=ServingState)
    bundle: bytes = b""
    serving: dict[str, bytes] = field(default_factory=dict)  # replica -> tls.crt
    reasons: list[tuple[datetime, str]] = field(default_factory=list)

    @property
    def secret(self) -> dict[str, object]:
        return as_secret(self.state)

    def leader_tick(self, now: datetime, policy: ServingPolicy = POLICY) -> None:
        step = next_step(self.state, self.bundle, now, policy)
        if step is not None:
            self.state = step[0]
            self.reasons.append((now, step[1]))
        self.bundle = ca_bundle(self.state)

    def reload(self, replica: str) -> None:
        assert self.state.leaf is not None
        self.serving[replica] = self.state.leaf.cert_pem

    def trusted(self, replica: str, now: datetime) -> bool:
        """Would the API server accept this replica's certificate now?"""
        cert = x509.load_pem_x509_certificate(self.serving[replica])
        cas = x509.load_pem_x509_certificates(self.bundle)
        issued = any(cert.issuer == ca.subject and _verifies(cert, ca) for ca in cas)
        return issued and cert.not_valid_before_utc <= now < cert.not_valid_after_utc and all(
            ca.not_valid_before_utc <= now < ca.not_valid_after_utc for ca in cas
            if _verifies(cert, ca))


def tick_until_a_next_ca(world: World) -> datetime:
    """Leader ticks from START until the next CA is made; returns the time of the next tick."""
    now = START
    while not world.state.next_ca:
        world.leader_tick(now)
        now += TICK
    return now


def _verifies(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
        return True
    except Exception:
        return False


def test_a_first_tick_makes_a_ca_and_a_certificate_for_every_host() -> None:
    world = World()
    world.leader_tick(START)
    assert world.reasons == [(START, "created a CA and serving certificate")]
    world.reload("a")
    assert world.trusted("a", START)
    state = read_state(world.secret)
    assert state.leaf is not None and state.leaf.cert_pem == world.serving["a"]
    assert serving_pair(world.secret) == (state.leaf.cert_pem, state.leaf.key_pem)
    sans = state.leaf.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert "kaiwu-reconciler-webhook.kaiwu-system.svc" in sans.value.get_values_for_type(
        x509.DNSName)
    assert [str(ip) for ip in sans.value.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    world.leader_tick(START + TICK)
    assert len(world.reasons) == 1, "nothing is due right after"


def test_three_ca_lifetimes_pass_and_the_api_server_trusts_every_replica_at_every_tick() -> None:
    world = World()
    now = START
    # The slowest replica allowed reloads just within the overlap.
    lagging_ticks = int(POLICY.overlap / TICK) - 1
    bundle_sizes = set()
    for tick in range(int(timedelta(seconds=1800) / TICK)):
        world.leader_tick(now)
        world.reload("leader")
        if tick % lagging_ticks == 0 or "standby" not in world.serving:
            world.reload("standby")
        for replica in ("leader", "standby"):
            assert world.trusted(replica, now), (replica, now - START, world.reasons[-3:])
        bundle_sizes.add(len(bundle_fingerprints(world.bundle)))
        now += TICK
    reasons = [reason for _, reason in world.reasons]
    took_over = reasons.count("the next CA took over and issued a new serving certificate")
    assert took_over >= 3, reasons
    assert reasons.count("the CA expires soon: made the next CA (trusted before it is used)") \
        == took_over
    assert reasons.count("dropped the previous CA (every replica serves the new one)") \
        == took_over
    assert "the serving certificate expires soon: issued a new one" in reasons
    assert bundle_sizes == {1, 2}, "two CAs only while one takes over from the other"


def test_the_next_ca_is_not_used_before_the_api_server_trusts_it() -> None:
    world = World()
    now = START
    while not world.reasons or not world.reasons[-1][1].startswith("the CA expires soon"):
        world.leader_tick(now)
        now += TICK
    # From here the registration keeps failing: the API server trusts only the current CA.
    # The next CA waits; the serving certificate is still renewed from the current one.
    trusted_before = ca_bundle(ServingState(ca_cert=world.state.ca_cert))
    assert world.state.ca is not None
    tick = 0
    while now < world.state.ca.cert.not_valid_after_utc - TICK:
        step = next_step(world.state, trusted_before, now, POLICY)
        if step is not None:
            assert "took over" not in step[1]
            world.state = step[0]
        world.bundle = trusted_before
        if tick % 4 == 1 or "a" not in world.serving:  # reloads every fourth tick
            world.reload("a")
        assert world.trusted("a", now), now - START
        now += TICK
        tick += 1


def test_a_certificate_that_no_longer_covers_the_hosts_is_reissued_at_once() -> None:
    world = World()
    world.leader_tick(START)
    wider = ServingPolicy(**{**POLICY.__dict__, "hosts": (*POLICY.hosts, "webhook.example")})
    world.leader_tick(START + TICK, wider)
    assert world.reasons[-1][1] == ("the serving certificate does not cover webhook.example: "
                                    "issued a new one")


def test_a_cert_manager_secret_is_read_and_its_ca_registered() -> None:
    world = World()
    world.leader_tick(START)
    ours = world.state
    assert ours.ca is not None and ours.leaf is not None
    issued = {"data": {
        "ca.crt": base64.b64encode(ours.ca.cert_pem).decode(),
        "tls.crt": base64.b64encode(ours.leaf.cert_pem).decode(),
        "tls.key": base64.b64encode(ours.leaf.key_pem).decode()}}
    state = read_state(issued)
    assert state.ca is None, "no CA key: nothing here may issue"
    assert bundle_fingerprints(ca_bundle(state)) == {ours.ca.cert.fingerprint(hashes.SHA256())}
    assert serving_pair(issued) == (ours.leaf.cert_pem, ours.leaf.key_pem)
    assert serving_pair({"data": {**issued["data"], "tls.key": issued["data"]["ca.crt"]}}) \
        is None, "a key that does not belong to the certificate is not served"


def test_an_expired_ca_is_replaced_by_a_fresh_one_with_a_new_certificate() -> None:
    world = World()
    world.leader_tick(START)
    old = world.state
    assert old.ca is not None
    expired = old.ca.cert.not_valid_after_utc
    world.leader_tick(expired)
    assert world.reasons[-1] == (expired, "the CA expired: created a new CA and serving "
                                          "certificate")
    assert world.state.ca is not None and world.state.ca.cert_pem != old.ca.cert_pem
    assert world.state.next_ca is None and world.state.previous_ca is None


def test_a_certificate_of_another_ca_or_past_its_end_is_reissued_at_once() -> None:
    world, other = World(), World()
    world.leader_tick(START)
    other.leader_tick(START)
    foreign = replace(world.state, leaf=other.state.leaf)
    step = next_step(foreign, world.bundle, START + TICK, POLICY)
    assert step is not None and step[1] == ("the serving certificate is not issued by the CA: "
                                            "issued a new one")
    leaf = step[0].leaf
    assert leaf is not None and leaf.cert.issuer == world.state.ca_cert.subject  # type: ignore[union-attr]
    assert world.state.leaf is not None
    ended = world.state.leaf.cert.not_valid_after_utc
    step = next_step(world.state, world.bundle, ended, POLICY)
    assert step is not None and step[1] == "the serving certificate expired: issued a new one"
    no_leaf = next_step(replace(world.state, leaf=None), world.bundle, START + TICK, POLICY)
    assert no_leaf is not None and no_leaf[1] == "no serving certificate: issued a new one"


def test_a_certificate_never_outlives_the_ca_that_issued_it() -> None:
    long_lived = ServingPolicy(**{**POLICY.__dict__, "cert_validity": timedelta(days=365)})
    world = World()
    world.leader_tick(START, long_lived)
    assert world.state.leaf is not None and world.state.ca is not None
    assert world.state.leaf.cert.not_valid_after_utc <= world.state.ca.cert.not_valid_after_utc


def test_a_secret_with_unreadable_parts_is_read_as_far_as_it_can_be() -> None:
    world = World()
    world.leader_tick(START)
    secret = world.secret
    data = dict(secret["data"])  # type: ignore[call-overload]
    broken = {"metadata": {"annotations": {"kaiwu.inspur.com/next-ca-since": "yesterday",
                                           "kaiwu.inspur.com/previous-ca-until": ""}},
              "data": {**data, "tls.crt": "not base64!", "previous-ca.crt":
                       base64.b64encode(b"not a certificate").decode()}}
    state = read_state(broken)
    assert state.ca is not None and state.leaf is None
    assert state.previous_ca is None and state.next_since is None and state.previous_until is None
    assert serving_pair(broken) is None
    assert bundle_fingerprints(b"garbage") == set()
    assert read_state(None) == ServingState()


def test_the_secret_says_since_when_the_next_ca_waits_and_until_when_the_old_one_is_kept(
        ) -> None:
    world = World()
    now = tick_until_a_next_ca(world)
    data, annotations = secret_content(world.state)
    assert sorted(data) == ["ca.crt", "ca.key", "next-ca.crt", "next-ca.key", "tls.crt",
                            "tls.key"]
    assert annotations == {"kaiwu.inspur.com/next-ca-since":
                           world.state.next_since.isoformat()}  # type: ignore[union-attr]
    assert read_state(as_secret(world.state)).next_since == world.state.next_since
    while world.state.previous_ca is None:
        world.leader_tick(now)
        now += TICK
    data, annotations = secret_content(world.state)
    assert "previous-ca.crt" in data and "previous-ca.key" not in data
    assert annotations == {"kaiwu.inspur.com/previous-ca-until":
                           world.state.previous_until.isoformat()}  # type: ignore[union-attr]
    parsed = read_state(as_secret(world.state))
    assert parsed.previous_until == world.state.previous_until
    assert parsed.previous_ca == world.state.previous_ca
    # A previous CA without its end date is dropped at the next step.
    step = next_step(replace(world.state, previous_until=None), world.bundle, now, POLICY)
    assert step is not None and step[0].previous_ca is None


def test_a_next_ca_without_its_date_writes_no_date_and_a_date_without_a_next_ca_is_dropped(
        ) -> None:
    # A Secret edited by hand: the next CA's files without the annotation, or the annotation
    # left behind without the files.
    world = World()
    tick_until_a_next_ca(world)
    assert secret_content(replace(world.state, next_since=None))[1] == {}
    assert secret_content(replace(world.state, next_ca=None))[1] == {}


def test_a_ca_listed_twice_is_registered_once() -> None:
    world = World()
    world.leader_tick(START)
    state = replace(world.state, previous_ca=world.state.ca_cert)
    assert ca_bundle(state) == ca_bundle(world.state)
    assert len(x509.load_pem_x509_certificates(ca_bundle(state))) == 1


def test_a_certificate_is_renewed_only_once_less_than_a_third_of_its_life_remains() -> None:
    world = World()
    world.leader_tick(START)
    assert world.state.leaf is not None
    end = world.state.leaf.cert.not_valid_after_utc
    world.leader_tick(end - POLICY.cert_validity / 3)  # exactly a third left: not yet
    assert len(world.reasons) == 1
    world.leader_tick(end - POLICY.cert_validity / 3 + timedelta(seconds=1))
    assert world.reasons[-1][1] == "the serving certificate expires soon: issued a new one"
