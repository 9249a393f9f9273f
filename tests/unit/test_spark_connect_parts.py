"""The Spark Connect server's parts that need no JVM: its token file (random, mode 600, refused
when others can read it), its settings (loopback, the token, the database clients start in), and
the one-line errors ``dkm sql --remote`` prints."""

from __future__ import annotations

import stat

import pytest

from dkmsks.spark.connect import make_token, read_token, remote_error, server_conf, token_path
from dkmsks.warehouse import Warehouse

pytestmark = pytest.mark.unit


def test_the_token_file(tmp_path):
    path = token_path(Warehouse(tmp_path / "wh", "sales"))
    assert path == tmp_path / "wh" / "run" / "spark-connect-sales.token"
    token = make_token(path)
    assert len(token) >= 43 and read_token(path) == token and make_token(path) != token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    with pytest.raises(ValueError, match="readable by others"):
        read_token(path)
    path.chmod(0o600)
    path.write_text("short\n")
    with pytest.raises(ValueError, match="no token of at least 32"):
        read_token(path)
    with pytest.raises(ValueError, match="spark_connect.sh start makes one"):
        read_token(tmp_path / "absent")


def test_the_server_settings(tmp_path):
    conf = server_conf(Warehouse(tmp_path), "127.0.0.1", 15002, "t" * 43)
    assert conf == {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": "15002",
                    "spark.connect.authenticate.token": "t" * 43}
    other = server_conf(Warehouse(tmp_path, "sales"), "127.0.0.1", 15002, "t" * 43)
    assert other["spark.sql.catalog.spark_catalog.defaultDatabase"] == "sales"


def test_remote_errors_are_one_line():
    text = ('<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = StatusCode.UNAUTHENTICATED\n'
            '\tdetails = "Invalid authentication token"\n\tdebug_error_string = "..."\n>')
    line = remote_error(Exception(text), "sc://localhost:15002")
    assert line.startswith("sc://localhost:15002: UNAUTHENTICATED: Invalid authentication token")
    assert "--token-file" in line and "\n" not in line
    assert "UNAVAILABLE" in remote_error(Exception("status = StatusCode.UNAVAILABLE\n details = \"x\""), "sc://h:1")
    assert remote_error(Exception("[TABLE_OR_VIEW_NOT_FOUND] no\nplan..."), "sc://h:1") == \
        "sc://h:1: [TABLE_OR_VIEW_NOT_FOUND] no"
