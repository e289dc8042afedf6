def _connect() -> None:
    raise ConnectionError("cannot reach db\n(is it running?)")


_connect()
