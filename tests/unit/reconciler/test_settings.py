"""Settings of `kaiwu reconcile`: defaults, KAIWU_* variables, flags, and clear refusals."""

from __future__ import annotations

import dataclasses

import pytest

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
