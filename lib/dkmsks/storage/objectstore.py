"""S3-compatible object storage for a warehouse every host reaches (``s3://bucket/prefix``).

Endpoint and credentials come from the usual AWS variables, never from the warehouse's
location or a command's flags: ``AWS_ENDPOINT_URL`` (absent: AWS itself), ``AWS_REGION``
(default ``us-east-1``), and either ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
(``AWS_SESSION_TOKEN``) or a profile of the shared credentials file (``AWS_PROFILE``,
``AWS_SHARED_CREDENTIALS_FILE``). They go to delta-rs (:func:`delta_options`), to pyarrow's
S3 filesystem (:func:`arrow_filesystem`) and to the object operations the warehouse needs
besides Delta tables (:class:`ObjectStore`: the leases of :mod:`dkmsks.storage.leases`, the
seal); Spark reads them from the environment itself (:mod:`dkmsks.spark.s3`). No secret is
ever printed: errors name the variable to fix, not its value.

A store that cannot be used — unreachable, a missing bucket, refused credentials — is a
:class:`WarehouseUnreachable` with one line that says which (:meth:`ObjectStore.check`); the
commands print it and exit with status 2 before writing anything.
"""

from __future__ import annotations

import configparser
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from dkmsks.warehouse import ObjectLocation

DEFAULT_REGION = "us-east-1"
#: How long one request may take before it counts as failed, and how often it is retried:
#: a lease renewal must fail within its lease (dkmsks.storage.leases), and a command facing a
#: store that is down should say so in seconds, not minutes.
REQUEST_TIMEOUT = timedelta(seconds=10)
CONNECT_TIMEOUT = timedelta(seconds=3)
RETRIES = 2


class WarehouseUnreachable(RuntimeError):
    """The object store of a warehouse cannot be used; the message is one line naming why."""


@dataclass(frozen=True)
class Settings:
    """Where and as whom to reach the store (from the environment, :meth:`from_env`)."""

    endpoint: str | None
    region: str
    access_key: str | None
    secret_key: str | None
    session_token: str | None
    #: Where the credentials came from, for messages ("AWS_ACCESS_KEY_ID", "profile p").
    source: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings the AWS variables give (a profile's keys when ``AWS_PROFILE`` is set
        and the access key is not)."""
        env = os.environ if env is None else env
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        token = env.get("AWS_SESSION_TOKEN")
        source = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        if not key and env.get("AWS_PROFILE"):
            profile = env["AWS_PROFILE"]
            key, secret, token = _profile_keys(profile, env)
            source = f"profile {profile}"
        return cls(endpoint, region, key or None, secret or None, token or None, source)

    @property
    def allow_http(self) -> bool:
        """Whether the endpoint is plain HTTP (a local or in-cluster store)."""
        return bool(self.endpoint and self.endpoint.startswith("http://"))

    def describe(self) -> str:
        """Where the store is, for messages (no credentials)."""
        return self.endpoint or f"AWS S3 ({self.region})"


def _profile_keys(profile: str, env: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """The keys of ``profile`` in the shared credentials file."""
    path = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials").expanduser()
    parser = configparser.ConfigParser()
    if not parser.read(path) or not parser.has_section(profile):
        raise WarehouseUnreachable(f"AWS_PROFILE={profile}: no such profile in {path}")
    section = parser[profile]
    return (section.get("aws_access_key_id"), section.get("aws_secret_access_key"),
            section.get("aws_session_token"))


def delta_options(settings: Settings | None = None) -> dict[str, str]:
    """delta-rs' ``storage_options`` for tables on the store."""
    s = settings or Settings.from_env()
    options = {"AWS_REGION": s.region}
    if s.endpoint:
        options["AWS_ENDPOINT_URL"] = s.endpoint
    if s.allow_http:
        options["AWS_ALLOW_HTTP"] = "true"
    if s.access_key and s.secret_key:
        options["AWS_ACCESS_KEY_ID"], options["AWS_SECRET_ACCESS_KEY"] = s.access_key, s.secret_key
    if s.session_token:
        options["AWS_SESSION_TOKEN"] = s.session_token
    return options


def arrow_filesystem(settings: Settings | None = None) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` on the store (for reading data files by their URIs)."""
    from pyarrow import fs

    s = settings or Settings.from_env()
    options: dict[str, Any] = {"region": s.region, "connect_timeout": CONNECT_TIMEOUT.total_seconds(),
                               "request_timeout": REQUEST_TIMEOUT.total_seconds()}
    if s.endpoint:
        scheme, _, rest = s.endpoint.partition("://")
        options.update(endpoint_override=rest, scheme=scheme)
    if s.access_key and s.secret_key:
        options.update(access_key=s.access_key, secret_key=s.secret_key, session_token=s.session_token)
    return fs.S3FileSystem(**options)


class _Stores(threading.local):
    """Each thread's clients by location (a client holds connections; per process, since a
    forked child must not reuse its parent's)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.stores: dict[tuple[ObjectLocation, Settings], ObjectStore] = {}


_stores = _Stores()


class ObjectStore:
    """The object operations a warehouse on object storage needs besides its Delta tables:
    small objects read and written whole, created only if absent, or replaced only if
    unchanged (compare-and-swap on the ETag: ``If-None-Match: *`` / ``If-Match``)."""

    def __init__(self, location: ObjectLocation, settings: Settings) -> None:
        from obstore.store import S3Store

        self.location = location
        self.settings = settings
        config: dict[str, Any] = {"region": settings.region}
        if settings.endpoint:
            config["endpoint"] = settings.endpoint
        if settings.access_key and settings.secret_key:
            config.update(access_key_id=settings.access_key, secret_access_key=settings.secret_key)
            if settings.session_token:
                config["session_token"] = settings.session_token
        self._store = S3Store(
            location.bucket, **config,
            client_options={"allow_http": settings.allow_http, "timeout": f"{int(REQUEST_TIMEOUT.total_seconds())}s",
                            "connect_timeout": f"{int(CONNECT_TIMEOUT.total_seconds())}s"},
            retry_config={"max_retries": RETRIES, "retry_timeout": REQUEST_TIMEOUT,
                          "backoff": {"init_backoff": timedelta(milliseconds=50),
                                      "max_backoff": timedelta(seconds=1), "base": 2.0}},
        )

    @classmethod
    def of(cls, location: ObjectLocation, settings: Settings | None = None) -> ObjectStore:
        """This thread's client of ``location`` (made once)."""
        settings = settings or Settings.from_env()
        if _stores.pid != os.getpid():
            _stores.pid, _stores.stores = os.getpid(), {}
        key = (location, settings)
        if key not in _stores.stores:
            _stores.stores[key] = cls(location, settings)
        return _stores.stores[key]

    # ------------------------------------------------------------------ reads
    def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, None when there is none."""
        import obstore

        try:
            result = obstore.get(self._store, key)
            return bytes(result.bytes()), str(result.meta["e_tag"])
        except FileNotFoundError:
            return None
        except Exception as err:
            raise self._failure(err) from err

    def head(self, key: str) -> dict[str, Any] | None:
        """The object's metadata (``e_tag``, ``size``, ``last_modified``), None when absent."""
        import obstore

        try:
            return dict(obstore.head(self._store, key))
        except FileNotFoundError:
            return None
        except Exception as err:
            raise self._failure(err) from err

    def has_prefix(self, prefix: str) -> bool:
        """Whether any object's key starts with ``prefix``."""
        import obstore

        try:
            return any(len(chunk) for chunk in obstore.list(self._store, prefix=prefix, chunk_size=1))
        except Exception as err:
            raise self._failure(err) from err

    def keys(self, prefix: str) -> list[str]:
        """The keys of every object whose key starts with ``prefix``."""
        import obstore

        try:
            return [str(meta["path"]) for chunk in obstore.list(self._store, prefix=prefix) for meta in chunk]
        except Exception as err:
            raise self._failure(err) from err

    # ------------------------------------------------------------------ writes
    def put(self, key: str, data: bytes) -> str:
        """Write the object whatever is there; its new ETag."""
        import obstore

        try:
            return str(obstore.put(self._store, key, data)["e_tag"])
        except Exception as err:
            raise self._failure(err) from err

    def create(self, key: str, data: bytes) -> str | None:
        """Write the object only if there is none (``If-None-Match: *``); its ETag, or None
        when one exists."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            return str(obstore.put(self._store, key, data, mode="create")["e_tag"])
        except (AlreadyExistsError, PreconditionError):
            return None
        except Exception as err:
            raise self._failure(err) from err

    def replace(self, key: str, data: bytes, etag: str) -> str | None:
        """Write the object only if it is still the one with ``etag`` (``If-Match``); the new
        ETag, or None when it changed or is gone."""
        import obstore
        from obstore.exceptions import PreconditionError

        try:
            return str(obstore.put(self._store, key, data, mode={"e_tag": etag})["e_tag"])
        except (PreconditionError, FileNotFoundError):
            return None
        except Exception as err:
            raise self._failure(err) from err

    def delete(self, key: str) -> None:
        """Remove the object (no error when absent)."""
        import obstore

        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            return
        except Exception as err:
            raise self._failure(err) from err

    # ------------------------------------------------------------------ errors
    def check(self) -> None:
        """Raise :class:`WarehouseUnreachable` unless the bucket answers to these credentials."""
        self.has_prefix(self.location.key("tables") + "/")

    def _failure(self, err: BaseException) -> WarehouseUnreachable:
        return WarehouseUnreachable(describe_failure(err, self.location, self.settings))


#: S3 error codes, by what the user has to fix.
_CREDENTIAL_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "XAdminUserNotFound",
                     "ExpiredToken", "InvalidToken", "403 Forbidden")
_UNREACHABLE_SIGNS = ("error sending request", "Connection refused", "connection closed", "dns error",
                      "timed out", "operation timed out", "tcp connect error")


def describe_failure(err: BaseException, location: ObjectLocation, settings: Settings) -> str:
    """One line saying why the store could not be used (no secret in it)."""
    text = str(err)
    where = settings.describe()
    if "NoSuchBucket" in text:
        return (f"warehouse {location.uri()}: bucket {location.bucket} does not exist at {where} "
                "(create it, e.g. scripts/objectstore.sh start, or fix DKMSKS_WAREHOUSE)")
    if any(code in text for code in _CREDENTIAL_CODES):
        return (f"warehouse {location.uri()}: {where} refused the credentials from {settings.source} "
                "(check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE)")
    if any(sign.lower() in text.lower() for sign in _UNREACHABLE_SIGNS):
        return (f"warehouse {location.uri()}: cannot reach the object store at {where} "
                "(is it running? check AWS_ENDPOINT_URL)")
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return f"warehouse {location.uri()}: the object store at {where} failed: {first[:300]}"
