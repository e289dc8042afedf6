"""Functions ``sql_query`` never runs, found by reading a query's names as Postgres's lexer does."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator

#: Why each refused function is refused: what it does outside the query's read-only transaction.
SIGNALS = "signals other sessions"
SERVER = "administers the server (configuration, logs, WAL, backups, replication, statistics)"
NOTIFY = "sends notifications to other sessions"
LOCKS = "takes advisory locks that other sessions wait on"
LARGE_OBJECTS = "reads or writes large objects and server files (lo_import, lo_export)"
SEQUENCES = "advances a sequence, which no rollback undoes"
FILES = "reads files on the database server"
CONNECTIONS = "opens connections to other databases"
SQL_TEXT = "runs SQL given as a string, which sql_query cannot check"

REFUSED: dict[str, str] = {
    **dict.fromkeys(("pg_cancel_backend", "pg_terminate_backend"), SIGNALS),
    **dict.fromkeys((
        "pg_reload_conf", "pg_rotate_logfile", "pg_rotate_logfile_old", "pg_promote",
        "pg_switch_wal", "pg_create_restore_point", "pg_backup_start", "pg_backup_stop",
        "pg_start_backup", "pg_stop_backup", "pg_wal_replay_pause", "pg_wal_replay_resume",
        "pg_log_backend_memory_contexts", "pg_logical_emit_message",
        "pg_create_physical_replication_slot", "pg_create_logical_replication_slot",
        "pg_copy_physical_replication_slot", "pg_copy_logical_replication_slot",
        "pg_drop_replication_slot", "pg_replication_slot_advance",
        "pg_logical_slot_get_changes", "pg_logical_slot_get_binary_changes",
        "pg_stat_statements_reset"), SERVER),
    "pg_notify": NOTIFY,
    **dict.fromkeys((
        "lo_close", "lo_creat", "lo_create", "lo_export", "lo_from_bytea", "lo_get",
        "lo_import", "lo_lseek", "lo_lseek64", "lo_open", "lo_put", "lo_tell", "lo_tell64",
        "lo_truncate", "lo_truncate64", "lo_unlink", "loread", "lowrite"), LARGE_OBJECTS),
    **dict.fromkeys(("nextval", "setval"), SEQUENCES),
    **dict.fromkeys((
        "pg_read_file", "pg_read_file_old", "pg_read_binary_file", "pg_ls_dir",
        "pg_stat_file", "pg_file_write", "pg_file_rename", "pg_file_unlink", "pg_file_sync",
        "pg_logdir_ls"), FILES),
    **dict.fromkeys(("query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema",
                     "ts_stat", "ts_rewrite"), SQL_TEXT),
}
#: Families refused by the start of their names.
REFUSED_PREFIXES: dict[str, str] = {
    "pg_advisory_": LOCKS, "pg_try_advisory_": LOCKS, "pg_stat_reset": SERVER,
    "pg_replication_origin_": SERVER, "dblink": CONNECTIONS, "pg_background": SQL_TEXT,
}

#: Postgres truncates identifiers to NAMEDATALEN - 1 bytes.
NAME_BYTES = 63
_IDENT_START = "A-Za-z_\u0080-\U0010ffff"
_IDENT = re.compile(f"[{_IDENT_START}][{_IDENT_START}0-9$]*")
#: Characters that start nothing this lexer looks at (digits, operators, spaces, brackets).
_SKIP = re.compile(f"[^{_IDENT_START}'\"$/-]+|.", re.DOTALL)
_DOLLAR_QUOTE = re.compile(f"\\$(?:[{_IDENT_START}][{_IDENT_START}0-9]*)?\\$")
_STRING_REST = re.compile(r"[^']*(?:''[^']*)*(?:'|\Z)")
_E_STRING_REST = re.compile(r"[^'\\]*(?:(?:\\.|'')[^'\\]*)*(?:'|\Z)", re.DOTALL)
_QUOTED_REST = re.compile(r'[^"]*(?:""[^"]*)*(?:"|\Z)')
_BLOCK_COMMENT_MARK = re.compile(r"/\*|\*/")
_NEWLINE = re.compile(r"[\n\r]")
_STRING_PREFIXES = frozenset("eEbBxXnN")
_SPACE = re.compile(r"[ \t\n\r\f\v]*")
#: A character that may be a U&"..." name's escape, in front of what it would escape.
#: Postgres takes one byte (so ASCII), not a hex digit, +, a quote or white space.
_ESCAPE_SEQUENCE = re.compile(
    r"""([!#-&(-*,-/:-@G-Z\[-`g-z{-~])(?=[0-9A-Fa-f]{4}|\+[0-9A-Fa-f]{6}|\1)""")
#: Raw characters of a U&"..." body that can make the first 63 bytes of its name
#: (an escape sequence is at most 8 characters).
ESCAPED_NAME_CHARS = NAME_BYTES * 8
#: More possible escape characters than this in one U&"..." name is refused, not tried.
MAX_ESCAPE_CANDIDATES = 8


class UnreadableName(ValueError):
    """A U&"..." name with too many possible escape characters to try each."""


def refused_function(text: str) -> tuple[str, str] | None:
    """The first name in ``text`` that is a refused function, and why; ``None`` for none.

    Every identifier of the query counts, wherever it stands (``f(x)``, ``pg_catalog.f(x)``,
    the attribute notation ``(x).f``, ``FROM f(x)``): names are compared as Postgres resolves
    them, after its lexer has dropped comments and strings, folded unquoted names to lower
    case, kept quoted ones as written, decoded ``U&"..."`` and truncated to 63 bytes. The
    caller makes the server lex the same way (``standard_conforming_strings=on``).
    """
    try:
        for name in identifiers(text):
            if name in REFUSED:
                return name, REFUSED[name]
            for prefix, why in REFUSED_PREFIXES.items():
                if name.startswith(prefix):
                    return name, why
    except UnreadableName as exc:
        return str(exc), ("has more possible UESCAPE characters than sql_query tries; write "
                          "the name without escapes")
    return None


def identifiers(text: str) -> Iterator[str]:
    """The identifiers of SQL ``text`` as Postgres names them (one or more readings each for
    ``U&"..."``, whose escape character is set after it). Strings, comments and dollar-quoted
    bodies are skipped exactly as Postgres skips them; anything else is read as code, so an
    error here only ever finds a name too many."""
    position, end = 0, len(text)
    while position < end:
        char = text[position]
        if text.startswith(("--", "/*"), position):
            position = _skip_space_and_comments(text, position)
        elif char == "'":
            position = _past(_STRING_REST, text, position + 1)
        elif char == '"':
            body_end = _past(_QUOTED_REST, text, position + 1)
            yield _truncate(text[position + 1:body_end - 1].replace('""', '"'))
            position = body_end
        elif char == "$":
            quote = _DOLLAR_QUOTE.match(text, position)
            if quote is None:  # a parameter ($1) or a lone $
                position += 1
            else:
                closing = text.find(quote.group(), quote.end())
                position = end if closing < 0 else closing + len(quote.group())
        elif (ident := _IDENT.match(text, position)) is not None:
            word, position = ident.group(), ident.end()
            following = text[position:position + 2]
            if word in ("u", "U") and following in ('&"', "&'"):
                position = yield from _unicode_escaped(text, position + 1)
            elif word in _STRING_PREFIXES and following[:1] == "'":
                rest = _E_STRING_REST if word in "eE" else _STRING_REST
                position = _past(rest, text, position + 1)
            else:
                yield _truncate(_lower_ascii(word))
        else:
            position = _past(_SKIP, text, position)


def _skip_block_comment(text: str, start: int) -> int:
    """The end of the ``/* ... */`` comment at ``start`` (they nest in Postgres)."""
    depth, position = 0, start
    while (mark := _BLOCK_COMMENT_MARK.search(text, position)) is not None:
        depth += 1 if mark.group() == "/*" else -1
        position = mark.end()
        if depth == 0:
            return position
    return len(text)  # unterminated: Postgres refuses the query


def _past(pattern: re.Pattern[str], text: str, position: int) -> int:
    """Where ``pattern`` (one that always matches, up to the end) stops from ``position``."""
    match = pattern.match(text, position)
    return len(text) if match is None else match.end()


def _unicode_escaped(text: str, quote_at: int) -> Generator[str, None, int]:
    """Yield the readings of the ``U&"..."`` identifier whose quote is at ``quote_at`` (a
    ``U&'...'`` string yields nothing) and return where it ends.

    Its escape character is ``\\`` unless a ``UESCAPE '...'`` clause follows (a comment may
    come between). Rather than read that clause's string (any string form Postgres accepts),
    every character the name's start holds in front of an escape sequence is tried: the one
    Postgres uses is among them. Names are cut at 63 bytes, so only the body's first
    ``ESCAPED_NAME_CHARS`` characters can matter."""
    if text[quote_at] == "'":
        return _past(_STRING_REST, text, quote_at + 1)
    body_end = _past(_QUOTED_REST, text, quote_at + 1)
    body = text[quote_at + 1:body_end - 1].replace('""', '"')
    escapes = {"\\"}
    after = _skip_space_and_comments(text, body_end)
    word = _IDENT.match(text, after)
    if word is not None and _lower_ascii(word.group()) == "uescape":
        escapes |= {match.group(1) for match in _ESCAPE_SEQUENCE.finditer(
            body[:ESCAPED_NAME_CHARS])}
        if len(escapes) > MAX_ESCAPE_CANDIDATES:
            raise UnreadableName(f'U&"{body[:40]}..."')
    for escape in escapes:
        decoded = _decode_unicode_escapes(body, escape)
        if decoded is not None:
            yield _truncate(decoded)
    return body_end


def _skip_space_and_comments(text: str, position: int) -> int:
    """The first position from ``position`` that is neither white space nor a comment."""
    while True:
        position = _past(_SPACE, text, position)
        if text.startswith("--", position):
            newline = _NEWLINE.search(text, position)
            position = newline.end() if newline else len(text)
        elif text.startswith("/*", position):
            position = _skip_block_comment(text, position)
        else:
            return position


def _decode_unicode_escapes(body: str, escape: str) -> str | None:
    """The first 63 characters of ``body`` with Postgres's ``\\XXXX``, ``\\+XXXXXX`` and
    ``\\\\`` escapes (``escape`` in place of the backslash) decoded; ``None`` where Postgres
    would reject them."""
    out: list[str] = []
    position = 0
    while position < len(body) and len(out) < NAME_BYTES:
        char = body[position]
        if char != escape:
            out.append(char)
            position += 1
            continue
        if body.startswith(escape, position + 1):
            out.append(escape)
            position += 2
            continue
        plus = body.startswith("+", position + 1)
        digits = body[position + 1 + plus:position + 1 + plus + (6 if plus else 4)]
        if len(digits) != (6 if plus else 4) or not all(c in "0123456789abcdefABCDEF"
                                                       for c in digits):
            return None
        code = int(digits, 16)
        if code > 0x10FFFF:
            return None
        out.append(chr(code))
        position += 1 + plus + len(digits)
    return "".join(out)


def _lower_ascii(word: str) -> str:
    """Postgres folds only ASCII letters of an unquoted name (in a UTF-8 database)."""
    return word.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _truncate(name: str) -> str:
    """``name`` cut to 63 bytes at a character boundary, as Postgres cuts identifiers."""
    encoded = name.encode("utf-8", "surrogatepass")
    if len(encoded) <= NAME_BYTES:
        return name
    return encoded[:NAME_BYTES].decode("utf-8", "ignore")
