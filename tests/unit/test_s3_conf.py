"""The Spark settings of a warehouse on S3 (dkmsks.spark.s3): S3A for s3:// and s3a://, the
endpoint and region of the environment, the commit-safe LogStore, and never a credential."""

from __future__ import annotations

import pytest

from dkmsks.spark.s3 import LOGSTORE_CLASS, s3_jars, s3a_conf

pytestmark = pytest.mark.unit

KEY = "test-access-key-id-for-this-test"
SECRET = "test-secret-access-key-for-this-test"
TOKEN = "test-session-token-for-this-test"


def credentials(**more: str) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN, **more}


def test_a_local_store_by_its_endpoint_path_style_over_http():
    conf = s3a_conf(credentials(AWS_ENDPOINT_URL="http://127.0.0.1:7070", AWS_REGION="us-east-1"))
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:7070"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"
    https = s3a_conf({"AWS_ENDPOINT_URL": "https://s3.example.com", "AWS_DEFAULT_REGION": "eu-west-1"})
    assert https["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert https["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"


def test_on_aws_itself_the_defaults_of_s3a():
    conf = s3a_conf({})
    for key in ("endpoint", "path.style.access", "connection.ssl.enabled", "endpoint.region"):
        assert f"spark.hadoop.fs.s3a.{key}" not in conf


def test_s3_urls_go_through_s3a_and_both_schemes_commit_through_the_conditional_logstore():
    conf = s3a_conf({})
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.delta.logStore.s3.impl"] == LOGSTORE_CLASS == "dkmsks.delta.ConditionalS3LogStore"
    assert conf["spark.delta.logStore.s3a.impl"] == LOGSTORE_CLASS
    assert conf["spark.hadoop.fs.s3a.create.conditional.enabled"] == "true"
    assert "spark.delta.logStore.class" not in conf  # that one would apply to local tables too


def test_credentials_come_from_the_environment_through_s3a_and_a_profile_when_one_is_named():
    providers = s3a_conf(credentials())["spark.hadoop.fs.s3a.aws.credentials.provider"].split(",")
    assert "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider" in providers
    assert providers[-1] == "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider"
    assert not any("Profile" in p for p in providers)
    named = s3a_conf({"AWS_PROFILE": "warehouse"})["spark.hadoop.fs.s3a.aws.credentials.provider"].split(",")
    assert named[-2:] == ["org.apache.hadoop.fs.s3a.auth.ProfileAWSCredentialsProvider", providers[-1]]


def test_no_credential_ever_reaches_a_setting():
    env = credentials(AWS_ENDPOINT_URL="http://127.0.0.1:7070", AWS_REGION="us-east-1", AWS_PROFILE="warehouse")
    conf = s3a_conf(env)
    for secret in (KEY, SECRET, TOKEN):
        assert not any(secret in key or secret in value for key, value in conf.items())
    assert not any(word in key for key in conf for word in ("access.key", "secret.key", "session.token"))


def test_an_endpoint_that_is_no_url_is_refused_with_an_example():
    for bad in ("127.0.0.1:7070", "ftp://store", "http://"):
        with pytest.raises(ValueError, match="http://127.0.0.1:7070"):
            s3a_conf({"AWS_ENDPOINT_URL": bad})


def test_the_jars_folder_is_the_bootstrapped_one_unless_the_environment_names_another(tmp_path, monkeypatch):
    (tmp_path / "b.jar").write_bytes(b"")
    (tmp_path / "a.jar").write_bytes(b"")
    (tmp_path / ".complete-0").write_bytes(b"")
    monkeypatch.setenv("DKMSKS_S3_JARS_DIR", str(tmp_path))
    assert s3_jars() == [tmp_path / "a.jar", tmp_path / "b.jar"]
    assert s3_jars(tmp_path / "absent") == []
