"""Secret references resolved from AWS Secrets Manager (moto in server mode, real boto3):
``TOREN_SECRETS`` bundles and ``VAR=aws-sm:<id>#key``; errors name the variable and the
secret, never a value; nothing logs a value."""

from __future__ import annotations

import json
import logging

import boto3
import pytest

from toren.errors import ConfigError
from toren.seams.secrets import find_references, resolve_environment

BUNDLE = {"CREW_TOKEN": "tok-bundle-7f3a", "OTHER": "other-91b2", "EXPLICIT": "from-bundle"}
KEYED = {"url": "postgresql://app:pw-5c1d@db/app", "n": 3}


@pytest.fixture
def secrets(sqs_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Secrets in moto (a bundle, a JSON secret with keys, a plain string, two broken
    bundles); their ARNs by name."""
    endpoint = sqs_env["TOREN_SQS_ENDPOINT_URL"]
    monkeypatch.setenv("TOREN_SECRETSMANAGER_ENDPOINT_URL", endpoint)
    client = boto3.client("secretsmanager", endpoint_url=endpoint, region_name="us-east-1")
    prefix = sqs_env["TOREN_SQS_PREFIX"]
    return {name: client.create_secret(Name=f"{prefix}{name}", SecretString=text)["ARN"]
            for name, text in {"bundle": json.dumps(BUNDLE), "keyed": json.dumps(KEYED),
                               "plain": "plain-e4d8", "broken": "{not json",
                               "bad-names": json.dumps({"n-1": "v"})}.items()}


def test_bundles_and_per_variable_references_become_values(
        secrets: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    env = {"TOREN_SECRETS": secrets["bundle"], "DATABASE_URL": f"aws-sm:{secrets['keyed']}#url",
           "COUNT": f"aws-sm:{secrets['keyed']}#n", "PLAIN": f"aws-sm:{secrets['plain']}",
           "EXPLICIT": "set-by-hand", "UNRELATED": "https://example.com/aws-sm:x"}
    names = resolve_environment(env)
    assert names == ["COUNT", "CREW_TOKEN", "DATABASE_URL", "OTHER", "PLAIN"]
    assert env | {"TOREN_SECRETS": ""} == {
        "TOREN_SECRETS": "", "DATABASE_URL": KEYED["url"], "COUNT": "3", "PLAIN": "plain-e4d8",
        "EXPLICIT": "set-by-hand",  # set explicitly: the bundle does not override it
        "UNRELATED": "https://example.com/aws-sm:x", "CREW_TOKEN": "tok-bundle-7f3a",
        "OTHER": "other-91b2"}
    logged = caplog.text
    for value in [*BUNDLE.values(), KEYED["url"], "plain-e4d8"]:
        assert value not in logged


def test_a_refresh_reads_the_startup_references_again(secrets: dict[str, str],
                                                      sqs_env: dict[str, str]) -> None:
    startup = {"TOKEN": f"aws-sm:{secrets['plain']}"}
    env = dict(startup)
    resolve_environment(env)
    assert env["TOKEN"] == "plain-e4d8"
    boto3.client("secretsmanager", endpoint_url=sqs_env["TOREN_SQS_ENDPOINT_URL"],
                 region_name="us-east-1").put_secret_value(SecretId=secrets["plain"],
                                                           SecretString="rotated-0a9c")
    resolve_environment(env, startup)  # env holds values now; the startup held references
    assert env["TOKEN"] == "rotated-0a9c"


@pytest.mark.parametrize(("reference", "says"), [
    ("aws-sm:{missing}", "Secrets Manager could not read"),
    ("aws-sm:{keyed}#nope", "has no key 'nope'; its keys: n, url"),
    ("aws-sm:{plain}#key", "is not a JSON object (its value is not shown)"),
])
def test_a_bad_reference_names_the_variable_or_secret_never_a_value(
        secrets: dict[str, str], reference: str, says: str) -> None:
    ids = secrets | {"missing": secrets["plain"].replace("plain", "absent")}
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")) as info:
        resolve_environment({"API_KEY": reference.format(**ids)})
    for value in ["plain-e4d8", KEYED["url"], "pw-5c1d"]:
        assert value not in info.value.message


def test_bad_toren_secrets_entries_are_refused(secrets: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="is not a JSON object"):
        resolve_environment({"TOREN_SECRETS": secrets["broken"]})
    with pytest.raises(ConfigError, match="#key picks from one secret"):
        resolve_environment({"TOREN_SECRETS": f"aws-sm:{secrets['keyed']}#url"})
    with pytest.raises(ConfigError, match="no secret source named 'vault' is installed"):
        resolve_environment({"TOREN_SECRETS": "vault:kv/toren"})
    with pytest.raises(ConfigError, match="keys that are not variable names: n-1"):
        resolve_environment({"TOREN_SECRETS": secrets["bad-names"]})


def test_values_that_only_look_like_references_are_left_alone() -> None:
    env = {"URL": "http://x", "NOTE": "vault:abc", "EMPTY": ""}
    assert find_references(env, {"aws-sm"}) == []


def test_sighup_is_taken_only_by_a_process_started_with_references(
        secrets: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from toren.seams import secrets as module

    monkeypatch.setattr(module, "STARTUP_ENVIRONMENT", {"PATH": "/usr/bin"})
    assert not module.has_startup_references()
    env = {"TOKEN": f"aws-sm:{secrets['plain']}"}
    monkeypatch.setattr(module, "STARTUP_ENVIRONMENT", {})
    assert module.resolve_at_startup(env) == ["TOKEN"]
    assert module.has_startup_references()
    assert {"TOKEN": f"aws-sm:{secrets['plain']}"} == module.STARTUP_ENVIRONMENT
