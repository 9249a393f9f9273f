"""Spark on a warehouse in S3-compatible object storage (``s3://bucket/prefix``): Hadoop's S3A
connector, credentials from the environment, and Delta commits that stay safe with every writer.

Delta 4.4's own LogStore for S3 is safe for one Spark driver only: it looks for a commit file and
then writes it, with a lock only its JVM sees, so a second driver or a delta-rs writer (publishers,
follow mode's journal) can have its commit silently replaced. :data:`LOGSTORE_CLASS`
(``build/logstore``, built by ``scripts/bootstrap.sh`` into ``.cache/jars-s3`` with the S3A jars)
commits by create-if-absent instead, as delta-rs does, through S3A's conditional create
(``If-None-Match: *``); a refused create is Delta's ordinary lost race: it re-checks and retries
at the next version.

The session gets no key or secret: Spark settings show up in the UI, in event logs and on
spark-submit command lines. S3A reads the credentials where the AWS SDK does (the environment's
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, a profile named by
``AWS_PROFILE``, an instance role). Executors write data files, so on a cluster every executor's
environment needs them too (a container's environment or its role, never ``spark.executorEnv``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

_REPO = Path(__file__).resolve().parents[3]

#: The LogStore of ``build/logstore``: Delta commits by create-if-absent (module doc).
LOGSTORE_CLASS = "dkmsks.delta.ConditionalS3LogStore"
S3A_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
#: The schemes a warehouse on S3 may use: ``s3://`` as delta-rs writes it, ``s3a://`` as Hadoop does.
SCHEMES = ("s3", "s3a")

#: S3A's own default chain (hadoop-aws 3.5.0 core-default.xml), named so that it is visible:
#: ``fs.s3a.access.key``-style settings (never set here), then the SDK's environment variables,
#: then the host's instance role. A profile is added before the role when ``AWS_PROFILE`` is set.
_ENV_PROVIDERS = (
    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
)
_PROFILE_PROVIDER = "org.apache.hadoop.fs.s3a.auth.ProfileAWSCredentialsProvider"
_ROLE_PROVIDER = "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider"


def s3_jars(jars_dir: str | Path | None = None) -> list[Path]:
    """The S3A connector, the AWS SDK modules it calls and :data:`LOGSTORE_CLASS`'s jar, fetched
    and built by ``scripts/bootstrap.sh`` (``$DKMSKS_S3_JARS_DIR`` or ``.cache/jars-s3``); the
    caller adds them to ``spark.jars`` beside Delta's."""
    env = os.environ.get("DKMSKS_S3_JARS_DIR")
    folder = Path(jars_dir or (env if env is not None else _REPO / ".cache" / "jars-s3"))
    return sorted(folder.glob("*.jar")) if folder.is_dir() else []


def s3a_conf(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The Spark settings for Delta tables on S3: ``s3://`` and ``s3a://`` paths through S3A,
    the endpoint and region of ``env`` (``AWS_ENDPOINT_URL``, absent on AWS itself;
    ``AWS_REGION`` or ``AWS_DEFAULT_REGION``), credentials looked up by S3A in the process's
    environment (module doc: never a key in a setting), and Delta's commits through
    :data:`LOGSTORE_CLASS` with S3A's conditional create on.

    Raises
    ------
    ValueError
        ``AWS_ENDPOINT_URL`` is not an ``http://`` or ``https://`` URL.
    """
    hadoop = {
        # s3:// as delta-rs and the AWS tools write it: the same tables by the same URLs in Spark.
        "fs.s3.impl": S3A_FILESYSTEM,
        # ... and for FileContext users (structured streaming's checkpoints); s3a has both.
        "fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
        "fs.s3a.aws.credentials.provider": ",".join(_credential_providers(env)),
        # Create-if-absent (If-None-Match: *); on by default in hadoop-aws 3.5.0, stated here since
        # the LogStore refuses to commit without it.
        "fs.s3a.create.conditional.enabled": "true",
    }
    endpoint = env.get("AWS_ENDPOINT_URL", "").strip()
    if endpoint:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"AWS_ENDPOINT_URL={endpoint!r}: give the store's URL, e.g. "
                             "http://127.0.0.1:7070 or https://s3.example.com")
        hadoop["fs.s3a.endpoint"] = endpoint
        # A store of its own (MinIO, Versity, Ceph, ...) has no bucket-named host names: the
        # bucket goes in the path, as delta-rs sends it to an endpoint.
        hadoop["fs.s3a.path.style.access"] = "true"
        hadoop["fs.s3a.connection.ssl.enabled"] = "true" if parts.scheme == "https" else "false"
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        hadoop["fs.s3a.endpoint.region"] = region
    conf = {f"spark.hadoop.{key}": value for key, value in hadoop.items()}
    for scheme in SCHEMES:
        conf[f"spark.delta.logStore.{scheme}.impl"] = LOGSTORE_CLASS
    return conf


def _credential_providers(env: Mapping[str, str]) -> list[str]:
    providers = list(_ENV_PROVIDERS)
    if env.get("AWS_PROFILE"):
        # S3A's profile provider reads AWS_PROFILE and AWS_SHARED_CREDENTIALS_FILE itself; it
        # is not in S3A's default chain.
        providers.append(_PROFILE_PROVIDER)
    providers.append(_ROLE_PROVIDER)
    return providers
