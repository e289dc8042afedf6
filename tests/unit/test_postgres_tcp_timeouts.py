"""Toren's TCP parameters for Postgres connections: derived from TOREN_DB_TCP_TIMEOUT, added
to DATABASE_URL, and never over a parameter the URL names itself."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from toren_postgres.connection import tcp_timeout_params, with_tcp_timeouts

from toren.config import Settings


def test_the_default_gives_a_silent_peer_up_within_30_seconds() -> None:
    assert Settings.from_env({}).db_tcp_timeout_s == 30.0
    assert Settings.from_env({"TOREN_DB_TCP_TIMEOUT": "10"}).db_tcp_timeout_s == 10.0
    # unacknowledged data for 30 s; an idle connection probed after 15 s, 3 probes 5 s apart
    assert tcp_timeout_params(30.0) == {
        "tcp_user_timeout": 30000, "keepalives": 1, "keepalives_idle": 15,
        "keepalives_interval": 5, "keepalives_count": 3}
    # libpq takes whole seconds for keepalives: a short timeout still probes every second
    assert tcp_timeout_params(2.0) == {
        "tcp_user_timeout": 2000, "keepalives": 1, "keepalives_idle": 1,
        "keepalives_interval": 1, "keepalives_count": 3}


def test_the_parameters_are_added_to_a_url_or_a_conninfo() -> None:
    for url in ("postgresql://toren:secret@db.example:6432/toren?sslmode=require",
                "host=db.example port=6432 user=toren password=secret dbname=toren "
                "sslmode=require"):
        params = conninfo_to_dict(with_tcp_timeouts(url, 30.0))
        assert params == {"host": "db.example", "port": "6432", "user": "toren",
                          "password": "secret", "dbname": "toren", "sslmode": "require",
                          "tcp_user_timeout": "30000", "keepalives": "1",
                          "keepalives_idle": "15", "keepalives_interval": "5",
                          "keepalives_count": "3"}


def test_what_the_url_names_wins() -> None:
    url = "postgresql://toren@db.example/toren?keepalives=0&tcp_user_timeout=120000"
    params = conninfo_to_dict(with_tcp_timeouts(url, 30.0))
    assert (params["keepalives"], params["tcp_user_timeout"]) == ("0", "120000")
    assert params["keepalives_idle"] == "15"  # the ones it does not name are still added
    named = ("host=db.example dbname=toren tcp_user_timeout=0 keepalives=1 keepalives_idle=60 "
             "keepalives_interval=10 keepalives_count=5")
    assert with_tcp_timeouts(named, 30.0) == named


def test_a_libpq_before_12_gets_keepalives_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psycopg.pq, "version", lambda: 110000)
    assert "tcp_user_timeout" not in tcp_timeout_params(30.0)
    assert tcp_timeout_params(30.0)["keepalives_idle"] == 15
