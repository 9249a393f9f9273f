"""dkm serve's parts on their own: dkm token (a token printed once, its SHA-256 kept in a file
of mode 600, list, revoke, errors), the rate limiter, the readers' reasons mapped to their
fields, and the registry's claims."""

from __future__ import annotations

import hashlib
import json
import stat

import pytest

from dkmsks.cli import main
from dkmsks.io.rejections import Reason
from dkmsks.service.auth import RateLimiter, Scope, TokenStore, bearer, retry_after
from dkmsks.service.problems import field_of
from dkmsks.service.registry import Registry

pytestmark = pytest.mark.unit


def test_dkm_token_create_list_revoke(tmp_path, capsys):
    wh = ["--warehouse", str(tmp_path / "wh")]
    assert main(["token", "create", "--name", "app-1", "--scope", "publish,subscribe", *wh]) == 0
    token = capsys.readouterr().out.splitlines()[0]
    assert token.startswith("dkm_") and len(token) == 4 + 8 + 1 + 43
    path = tmp_path / "wh" / "run" / "tokens.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = json.loads(path.read_text())["tokens"]
    assert stored[0]["sha256"] == hashlib.sha256(token.encode()).hexdigest() and token not in path.read_text()
    assert stored[0]["scopes"] == ["publish", "subscribe"]
    who = TokenStore(path).verify(token)
    assert who is not None and who.name == "app-1" and who.can(Scope.PUBLISH) and not who.can(Scope.ADMIN)
    assert TokenStore(path).verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert main(["token", "list", *wh]) == 0
    listed = capsys.readouterr().out
    assert "app-1" in listed and token not in listed and stored[0]["sha256"] not in listed
    assert main(["token", "revoke", "app-1", *wh]) == 0
    assert TokenStore(path).verify(token) is None
    assert main(["token", "revoke", "app-1", *wh]) == 2
    assert "no token has the id or name 'app-1'" in capsys.readouterr().err
    assert main(["token", "create", "--name", "x", "--scope", "root", *wh]) == 2
    assert "unknown scope 'root'; the scopes are publish, subscribe, admin" in capsys.readouterr().err
    assert main(["token", "create", "--name", "Bad Name", "--scope", "admin", *wh]) == 2


def test_an_admin_token_holds_every_scope(tmp_path):
    store = TokenStore(tmp_path / "t.json")
    _, token = store.create("ops", [Scope.ADMIN])
    who = store.verify(token)
    assert who is not None and all(who.can(s) for s in Scope) and who.is_admin


def test_bearer_header_and_retry_after():
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None and bearer("Bearer ") is None and bearer(None) is None
    assert retry_after(0.01) == "1" and retry_after(2.2) == "3"


def test_the_rate_limiter_is_a_token_bucket_per_key():
    now = [0.0]
    limiter = RateLimiter(2.0, 3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") == 0.0
    now[0] += 0.5
    assert limiter.take("a") == 0.0 and limiter.take("a") > 0


def test_every_reason_of_the_rules_names_its_field():
    examples = {
        Reason.NOT_INTEGER % ("k", "2.5"): "k", Reason.BEYOND_INT64 % ("id", "9" * 20): "id",
        Reason.NOT_A_NUMBER % ("y", "abc"): "y", Reason.NOT_FINITE % ("x", "nan"): "x",
        Reason.OUTSIDE_BOUNDS % ("x", "500", "[-180, 180]"): "x", Reason.KEYWORDS_EMPTY: "keywords",
        Reason.EMPTY_TOKEN % "a  b": "keywords", Reason.KEYWORD_TOO_LONG % ("a...", 300, 256): "keywords",
        Reason.NOT_NORMALISED % "Café": "keywords", Reason.UNKNOWN_OP % "upsert": "op", Reason.K_TOO_SMALL % 0: "k",
        Reason.K_TOO_LARGE % (2000, 1000): "k", Reason.DUPLICATE_ID % (5, 2): "id",
        Reason.ALREADY_INGESTED % (5, "f.tsv", 3): "id", Reason.LATE % (3, 4): "t",
        Reason.DELETE_NOT_LIVE % (5, 3): "id", Reason.INSERT_LIVE % 5: "id", Reason.COLUMN_COUNT % (5, 4): "",
        "timestamp 3 is closed: the pipeline has taken every timestamp up to 4; publish at t > 4": "t",
    }
    templates = {v for k, v in vars(Reason).items() if k.isupper()}
    assert len(templates) == 20  # a new reason needs a field here and in problems.py
    for reason, expected in examples.items():
        assert field_of(reason) == expected, reason


def test_claims_say_who_owns_a_change(tmp_path):
    registry = Registry(tmp_path / "r.sqlite3")
    registry.claim(5, 2, "alice")
    registry.observe_registrations([(5, 2), (5, 6), (7, 3)])  # 7 was never claimed: not followed
    registry.claim(5, 9, "bob")
    assert [registry.owner_at(5, t) for t in (1, 2, 5, 6, 8, 9, 12)] == [None, "alice", "alice", None, None, "bob",
                                                                         "bob"]
    assert registry.owner_at(5, 6, deletion=True) == "alice" and registry.owner_at(5, 9, deletion=True) is None
    assert registry.owner_of_registration(5, 2) == "alice" and registry.owner_of_registration(5, 3) is None
    assert not registry.claimed(7) and registry.owned_by("bob") == [(5, 9)]
    registry.close()
    again = Registry(tmp_path / "r.sqlite3")  # durable
    assert again.owner_at(5, 12) == "bob" and again.principals_of(5) == {"alice", None, "bob"}
    assert stat.S_IMODE((tmp_path / "r.sqlite3").stat().st_mode) == 0o600
    again.store("alice", "k1", "abc", 202, {"t": 3})
    assert again.stored("alice", "k1").response == {"t": 3} and again.stored("bob", "k1") is None


def test_the_vendored_web_assets_match_their_manifest():
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([str(repo / "scripts" / "vendor_web.sh"), "--check"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    static = repo / "lib/dkmsks/service/static"
    pinned = {"swagger-ui": "swagger-ui-dist@5.36.0", "leaflet": "leaflet@1.9.4",
              "topojson-client": "topojson-client@3.1.0", "world-atlas": "world-atlas@2.0.2",
              "us-atlas": "us-atlas@3.0.1"}
    assert {p.name for p in static.iterdir() if p.is_dir()} == set(pinned)
    listed = {line.split("  ./", 1)[1] for line in (static / "MANIFEST.sha256").read_text().splitlines()}
    assert listed == {str(p.relative_to(static)) for p in static.rglob("*") if p.is_file()} - {"MANIFEST.sha256"}
    for folder, version in pinned.items():
        assert (static / folder / "VERSION").read_text().strip() == version
        assert (static / folder / "LICENSE").stat().st_size > 500, f"{folder}: its licence travels with it"
