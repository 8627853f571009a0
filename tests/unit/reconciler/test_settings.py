"""Settings of `kaiwu reconcile`: defaults, KAIWU_* variables, flags, and clear refusals."""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from reconciler import settings as settings_module
from reconciler.cli import reconcile
from reconciler.settings import Settings, SettingsError, env_name, flag_name, from_args, parser


def test_defaults_suit_a_two_replica_deployment() -> None:
    settings = from_args([], environ={})

    assert settings.leader_election is True
    assert settings.workers == 2
    assert settings.source == "cluster" and settings.source_dir is None
    assert settings.prune_deleted_clusters is False
    assert settings.renew_deadline_s < settings.lease_duration_s
    assert settings.http_host_port == ("0.0.0.0", 8090)


def test_a_flag_wins_over_a_variable_which_wins_over_the_default() -> None:
    environ = {"KAIWU_WORKERS": "4", "KAIWU_WATCH_NAMESPACE": "shop",
               "KAIWU_LEADER_ELECTION": "false", "KAIWU_SOURCE": "dir:/git/repo/clusters"}

    settings = from_args(["--workers", "8", "--prune-deleted-clusters"], environ=environ)

    assert settings.workers == 8
    assert settings.watch_namespace == "shop"
    assert settings.leader_election is False
    assert settings.prune_deleted_clusters is True
    assert str(settings.source_dir) == "/git/repo/clusters"


def test_every_setting_has_a_documented_flag_and_variable() -> None:
    help_text = parser().format_help()
    for field in dataclasses.fields(Settings):
        assert field.metadata.get("help"), f"{field.name} has no help text"
        assert f"--{flag_name(field.name)}" in help_text
        assert env_name(field.name) in help_text


@pytest.mark.parametrize(("argv", "environ", "complaint"), [
    (["--renew-deadline-s", "20"], {}, "--renew-deadline-s: must be shorter than"),
    (["--workers", "0"], {}, "--workers: must be at least 1"),
    (["--source", "git:repo"], {}, "neither 'cluster' nor 'dir:PATH'"),
    ([], {"KAIWU_WORKERS": "many"}, "KAIWU_WORKERS: 'many' is not an int"),
    ([], {"KAIWU_LEADER_ELECTION": "perhaps"}, "'perhaps' is not a boolean"),
    (["--http-address", "localhost"], {}, "is not HOST:PORT"),
])
def test_settings_the_reconciler_cannot_run_with_are_refused_by_name(
        argv: list[str], environ: dict[str, str], complaint: str) -> None:
    with pytest.raises(SettingsError) as refused:
        from_args(argv, environ=environ)
    assert complaint in str(refused.value)


def test_kaiwu_reconcile_exits_2_on_invalid_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert reconcile(["--retry-period-s", "30"]) == 2
    assert "--retry-period-s: must be shorter than --renew-deadline-s" in capsys.readouterr().err


def settings_with(**changes: Any) -> Settings:
    return Settings(**changes)


def refusal(**changes: Any) -> str:
    """What `kaiwu reconcile` says about settings with these values."""
    with pytest.raises(SettingsError) as refused:
        Settings(**changes)
    return str(refused.value)


@pytest.mark.parametrize("name", [
    "resync_period_s", "lease_duration_s", "renew_deadline_s", "retry_period_s",
    "reconnect_backoff_base_s", "error_backoff_base_s", "api_timeout_s", "exec_timeout_s",
    "fight_window_s", "lifecycle_poll_s", "node_probe_every_s", "long_gone_after_s",
    "drift_backoff_base_s",
    "cluster_rate_per_s", "overall_rate_per_s", "webhook_ca_validity_s",
    "webhook_cert_validity_s", "webhook_ca_overlap_s", "webhook_reload_s"])
def test_periods_and_rates_must_be_above_zero_and_a_fraction_of_a_second_will_do(
        name: str) -> None:
    refused = refusal(**{name: 0})
    assert refused.startswith(f"--{name.replace('_', '-')}: must be greater than 0")
    # (These four must also stay above another setting, so a tenth of a second is too little.)
    if name not in ("lease_duration_s", "renew_deadline_s", "webhook_ca_validity_s",
                    "webhook_ca_overlap_s"):
        assert getattr(settings_with(**{name: 0.1}), name) == 0.1


@pytest.mark.parametrize("name", ["min_reconcile_interval_s", "shutdown_grace_s",
                                  "source_debounce_s", "shard_handover_s"])
def test_waits_may_be_zero_but_not_negative(name: str) -> None:
    assert getattr(settings_with(**{name: 0}), name) == 0
    assert refusal(**{name: -0.5}) == f"--{name.replace('_', '-')}: must not be negative"


@pytest.mark.parametrize("name", ["workers", "cluster_burst", "overall_burst",
                                  "watch_timeout_s", "fight_threshold"])
def test_counts_start_at_one(name: str) -> None:
    assert getattr(settings_with(**{name: 1}), name) == 1
    assert refusal(**{name: 0}) == f"--{name.replace('_', '-')}: must be at least 1"


@pytest.mark.parametrize(("changes", "complaint"), [
    ({"error_backoff_base_s": 2.0, "error_backoff_max_s": 1.0},
     "--error-backoff-max-s: must not be below --error-backoff-base-s"),
    ({"reconnect_backoff_base_s": 2.0, "reconnect_backoff_max_s": 1.0},
     "--reconnect-backoff-max-s: must not be below --reconnect-backoff-base-s"),
    ({"drift_backoff_base_s": 2.0, "drift_backoff_max_s": 1.0},
     "--drift-backoff-max-s: must not be below --drift-backoff-base-s"),
    ({"renew_deadline_s": 15.0}, "--renew-deadline-s: must be shorter than --lease-duration-s"),
    ({"retry_period_s": 10.0}, "--retry-period-s: must be shorter than --renew-deadline-s"),
    ({"identity": ""}, "--identity: must not be empty"),
    ({"lease_name": ""}, "--lease-name: must not be empty"),
    ({"field_manager": ""}, "--field-manager: must not be empty"),
    ({"shard": "-eu"}, "--shard: '-eu' is not a label value (letters, digits, '-', '_', '.', "
                       "at most 63, starting and ending with a letter or digit)"),
    ({"shard": "e" * 64}, f"--shard: {'e' * 64!r} is not a label value (letters, digits, '-', "
                          "'_', '.', at most 63, starting and ending with a letter or digit)"),
    ({"shard": "eu", "source": "dir:/git"},
     "--shard: directory mode applies every file it finds: run it unsharded"),
    ({"source": "dir:"}, "--source: 'dir:' is neither 'cluster' nor 'dir:PATH'"),
    ({"log_format": "xml"}, "--log-format: one of json, text"),
    ({"log_level": "trace"}, "--log-level: one of debug, info, warning, error"),
    ({"webhook_failure_policy": "fail"}, "--webhook-failure-policy: one of Fail, Ignore"),
    ({"webhook_timeout_s": 0}, "--webhook-timeout-s: must be 1 to 30 (the API server's limit)"),
    ({"webhook_timeout_s": 31}, "--webhook-timeout-s: must be 1 to 30 (the API server's limit)"),
    ({"webhook_cert_source": "cert-manager"}, "--webhook-cert-source: one of reconciler, secret"),
    ({"webhook_url": "http://reconciler.example:9443"},
     "--webhook-url: must start with https://"),
    ({"webhook_ca_validity_s": 3000.0, "webhook_cert_validity_s": 1001.0},
     "--webhook-cert-validity-s: must be at most a third of --webhook-ca-validity-s"),
    ({"webhook_ca_overlap_s": 59.0},
     "--webhook-ca-overlap-s: must be at least twice --webhook-reload-s (every replica "
     "reloads in between)"),
    ({"webhook_ca_validity_s": 1980.0, "webhook_cert_validity_s": 600.0},
     "--webhook-ca-validity-s: must leave a third of it for a rotation: above 6 x "
     "(--webhook-ca-overlap-s + --webhook-reload-s)"),
    ({"http_address": "0.0.0.0:65536"}, "--http-address: '0.0.0.0:65536' is not HOST:PORT"),
    ({"webhook_address": "0.0.0.0:"}, "--webhook-address: '0.0.0.0:' is not HOST:PORT"),
])
def test_each_rule_is_refused_with_its_flag_and_what_to_do(changes: dict[str, Any],
                                                          complaint: str) -> None:
    assert refusal(**changes) == complaint


@pytest.mark.parametrize("changes", [
    {"error_backoff_base_s": 2.0, "error_backoff_max_s": 2.0},
    {"reconnect_backoff_base_s": 2.0, "reconnect_backoff_max_s": 2.0},
    {"drift_backoff_base_s": 2.0, "drift_backoff_max_s": 2.0},
    {"shard": "e" * 63}, {"shard": "eu-1_a.b"}, {"source": "dir:/git"},
    {"log_format": "text", "log_level": "debug"},
    {"webhook_failure_policy": "Ignore", "webhook_cert_source": "secret"},
    {"webhook_timeout_s": 1}, {"webhook_timeout_s": 30},
    {"webhook_url": "https://reconciler.example:9443"},
    {"webhook_ca_validity_s": 3000.0, "webhook_cert_validity_s": 1000.0},
    {"webhook_ca_overlap_s": 60.0},
    {"webhook_ca_validity_s": 1983.0, "webhook_cert_validity_s": 600.0},
    {"http_address": "0.0.0.0:65535", "webhook_address": ":0"},
])
def test_values_at_the_edge_of_each_rule_are_accepted(changes: dict[str, Any]) -> None:
    settings = Settings(**changes)
    assert all(getattr(settings, name) == value for name, value in changes.items())


def test_several_mistakes_are_reported_together() -> None:
    assert refusal(workers=0, log_level="loud") == (
        "--workers: must be at least 1; --log-level: one of debug, info, warning, error")


def test_addresses_without_a_host_listen_everywhere() -> None:
    settings = Settings(http_address=":9000", webhook_address="127.0.0.1:8443")
    assert settings.http_host_port == ("0.0.0.0", 9000)
    assert settings.webhook_host_port == ("127.0.0.1", 8443)
    assert Settings(webhook_address=":9443").webhook_host_port == ("0.0.0.0", 9443)
    assert Settings(http_address="[::1]:8090").http_host_port == ("[::1]", 8090)


def test_a_sharded_reconciler_watches_its_label_and_competes_for_its_own_lease() -> None:
    eu = Settings(shard="eu")
    assert eu.shard_selector == "kaiwu.inspur.com/shard=eu"
    assert eu.effective_lease_name() == "kaiwu-reconciler-eu"
    assert eu.owns_labels({"kaiwu.inspur.com/shard": "eu"})
    assert not eu.owns_labels({"kaiwu.inspur.com/shard": "us"})
    assert not eu.owns_labels(None)
    unsharded = Settings()
    assert unsharded.shard_selector == "!kaiwu.inspur.com/shard"
    assert unsharded.effective_lease_name() == "kaiwu-reconciler"
    assert unsharded.owns_labels(None) and unsharded.owns_labels({"team": "shop"})
    assert not unsharded.owns_labels({"kaiwu.inspur.com/shard": "eu"})


def test_the_lease_and_webhook_names_follow_the_pods_namespace(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    namespace_file = tmp_path / "namespace"
    monkeypatch.setattr(settings_module, "POD_NAMESPACE_FILE", namespace_file)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert settings_module.pod_namespace() == ""
    assert Settings().effective_lease_namespace() == "default"
    assert Settings().effective_webhook_configuration() == "kaiwu-reconciler-default"
    namespace_file.write_text("kaiwu-system\n")
    assert Settings().effective_lease_namespace() == "kaiwu-system"
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert Settings().effective_lease_namespace() == "ops"
    assert Settings().effective_webhook_configuration() == "kaiwu-reconciler-ops"
    assert Settings(lease_namespace="leases").effective_lease_namespace() == "leases"
    assert Settings(webhook_configuration="kaiwu").effective_webhook_configuration() == "kaiwu"


def test_a_replica_is_named_by_its_host_and_process() -> None:
    assert Settings().identity == f"{socket.gethostname()}_{os.getpid()}"


def test_a_changed_copy_is_checked_again() -> None:
    settings = Settings()
    assert settings.replace(workers=5).workers == 5 and settings.workers == 2
    with pytest.raises(SettingsError, match="--workers: must be at least 1"):
        settings.replace(workers=0)


def test_booleans_numbers_and_empty_variables_from_the_environment() -> None:
    settings = from_args([], environ={"KAIWU_LEADER_ELECTION": " Off ", "KAIWU_WEBHOOK": "YES",
                                      "KAIWU_FREE_ECHOES": "0", "KAIWU_LOG_LEVEL": "",
                                      "KAIWU_RESYNC_PERIOD_S": "2.5", "KAIWU_WORKERS": "3"})
    assert (settings.leader_election, settings.webhook, settings.free_echoes) == (
        False, True, False)
    assert settings.log_level == "info"  # an empty variable is as good as unset
    assert settings.resync_period_s == 2.5 and settings.workers == 3
    assert from_args([], environ={"KAIWU_WEBHOOK": "on"}).webhook is True
    assert from_args([], environ={"KAIWU_WEBHOOK": "1"}).webhook is True
    assert from_args(["--no-leader-election"], environ={"KAIWU_LEADER_ELECTION": "yes"}
                     ).leader_election is False
    with pytest.raises(SettingsError) as refused:
        from_args(["--resync-period-s", "soon"], environ={})
    assert str(refused.value) == "--resync-period-s: 'soon' is not a float"
    with pytest.raises(SettingsError) as refused:
        from_args(["--workers", "2.5"], environ={})
    assert str(refused.value) == "--workers: '2.5' is not an int"
    with pytest.raises(SettingsError) as refused:
        from_args([], environ={"KAIWU_WEBHOOK": "maybe"})
    assert str(refused.value) == "KAIWU_WEBHOOK: 'maybe' is not a boolean (true or false)"


def test_help_names_each_variable_and_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    help_text = " ".join(parser().format_help().split())
    assert help_text.startswith("usage: kaiwu reconcile ")
    assert "a flag wins over a variable" in help_text
    assert "environment variable KAIWU_<FLAG>" in help_text
    assert ("clusters reconciled in parallel (one cluster is never reconciled by two at once) "
            "[KAIWU_WORKERS; default 2]") in help_text
    assert "--workers WORKERS" in help_text
    # No default shown where there is none, or it is empty.
    assert "[KAIWU_KUBECONFIG]" in help_text and "[KAIWU_WATCH_NAMESPACE]" in help_text
    assert "--leader-election, --no-leader-election" in help_text
    assert parser("kaiwu-reconciler").prog == "kaiwu-reconciler"
