"""A multi-host DATABASE_URL (a primary and its replicas): how Toren names it in startup lines
and errors, and that Toren's TCP parameters apply to every host of it."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict
from toren_postgres.connection import describe_url, with_tcp_timeouts

MULTI = ("postgresql://toren:secret@db1.example:5432,db2.example:6432/toren"
         "?target_session_attrs=read-write")


def test_each_host_is_named_with_its_port_and_no_password() -> None:
    assert describe_url(MULTI) == "toren@db1.example:5432,db2.example:6432/toren"
    assert describe_url("host=db1,db2 port=5433 dbname=toren user=toren "
                        "target_session_attrs=read-write") == "toren@db1:5433,db2:5433/toren"
    assert describe_url("postgresql://toren@db1,db2/toren") == "toren@db1:5432,db2:5432/toren"
    assert "secret" not in describe_url(MULTI)


def test_the_tcp_parameters_and_target_session_attrs_go_together() -> None:
    params = conninfo_to_dict(with_tcp_timeouts(MULTI, 30.0))
    assert params["host"] == "db1.example,db2.example" and params["port"] == "5432,6432"
    assert params["target_session_attrs"] == "read-write"
    assert params["tcp_user_timeout"] == "30000" and params["keepalives"] == "1"
