"""``SpanEncoder``: finished spans to the bytes of an OTLP ``ExportTraceServiceRequest``,
written in the protobuf wire format directly (``toren_otel.exporter`` calls it once per batch
in the span processor's export thread).

The SDK's encoder (``encode_spans(spans).SerializePartialToString()``) builds a protobuf
message object per span, attribute and value and then serializes them: ~45 µs a span, in a
thread that competes with the workers for the GIL. This one writes the same bytes with what
repeats cached: the resource and scope (encoded once), attribute keys, and ``KeyValue`` pairs
of short strings (agent, model, tool names, run ids of the batch). It encodes every field the
SDK's encoder does (opentelemetry-exporter-otlp-proto-common 1.45: ids, trace state, parent,
name, kind, times, attributes of every value type incl. arrays and maps, events, links,
status, flags, dropped counts, resource and scope with their attributes and schema urls), in
field-number order, as the SDK's serializer does. Where the SDK would log and skip an
attribute (an int beyond 64 bits, a value of another type), this raises ``EncodingError`` and
the caller encodes that batch with the SDK's encoder instead.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from toren.plugin import TorenError

_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MASK64 = (1 << 64) - 1

#: Span flags (``SpanFlags``): the context's is-remote bit is known; the parent is remote.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200

#: Cached ``KeyValue`` encodings of (key, short string) pairs; cleared when full.
_CACHE_LIMIT = 8192
_CACHED_STRING_LEN = 128


class EncodingError(TorenError):
    """A span holds a value the OTLP encoding cannot carry as the SDK's encoder would (raised
    by ``SpanEncoder.encode``; the exporter then encodes the batch with the SDK's encoder,
    which logs and skips the attribute)."""


def _varint(value: int) -> bytes:
    """``value`` (0 <= value < 2**64) as a protobuf varint."""
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((n,)) for n in range(0x80)]


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    n = len(payload)
    return tag + (_SMALL[n] if n < 0x80 else _varint(n)) + payload


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


# tags, by message: (field number << 3 | wire type)
_T_RESOURCE_SPANS = _tag(1, 2)           # ExportTraceServiceRequest.resource_spans
_T_RS_RESOURCE = _tag(1, 2)              # ResourceSpans.resource
_T_RS_SCOPE_SPANS = _tag(2, 2)           # ResourceSpans.scope_spans
_T_RS_SCHEMA_URL = _tag(3, 2)            # ResourceSpans.schema_url
_T_RESOURCE_ATTRIBUTE = _tag(1, 2)       # Resource.attributes
_T_SS_SCOPE = _tag(1, 2)                 # ScopeSpans.scope
_T_SS_SPANS = _tag(2, 2)                 # ScopeSpans.spans
_T_SS_SCHEMA_URL = _tag(3, 2)            # ScopeSpans.schema_url
_T_SCOPE_NAME = _tag(1, 2)               # InstrumentationScope.name
_T_SCOPE_VERSION = _tag(2, 2)            # InstrumentationScope.version
_T_SCOPE_ATTRIBUTE = _tag(3, 2)          # InstrumentationScope.attributes
_T_TRACE_ID = _tag(1, 2)                 # Span.trace_id
_T_SPAN_ID = _tag(2, 2)                  # Span.span_id
_T_TRACE_STATE = _tag(3, 2)              # Span.trace_state
_T_PARENT_SPAN_ID = _tag(4, 2)           # Span.parent_span_id
_T_NAME = _tag(5, 2)                     # Span.name
_T_KIND = _tag(6, 0)                     # Span.kind
_T_START = _tag(7, 1)                    # Span.start_time_unix_nano
_T_END = _tag(8, 1)                      # Span.end_time_unix_nano
_T_ATTRIBUTE = _tag(9, 2)                # Span.attributes
_T_DROPPED_ATTRIBUTES = _tag(10, 0)      # Span.dropped_attributes_count
_T_EVENT = _tag(11, 2)                   # Span.events
_T_DROPPED_EVENTS = _tag(12, 0)          # Span.dropped_events_count
_T_LINK = _tag(13, 2)                    # Span.links
_T_DROPPED_LINKS = _tag(14, 0)           # Span.dropped_links_count
_T_STATUS = _tag(15, 2)                  # Span.status
_T_FLAGS = _tag(16, 5)                   # Span.flags
_T_EVENT_TIME = _tag(1, 1)               # Span.Event.time_unix_nano
_T_EVENT_NAME = _tag(2, 2)               # Span.Event.name
_T_EVENT_ATTRIBUTE = _tag(3, 2)          # Span.Event.attributes
_T_EVENT_DROPPED = _tag(4, 0)            # Span.Event.dropped_attributes_count
_T_LINK_TRACE_ID = _tag(1, 2)            # Span.Link.trace_id
_T_LINK_SPAN_ID = _tag(2, 2)             # Span.Link.span_id
_T_LINK_ATTRIBUTE = _tag(4, 2)           # Span.Link.attributes
_T_LINK_DROPPED = _tag(5, 0)             # Span.Link.dropped_attributes_count
_T_LINK_FLAGS = _tag(6, 5)               # Span.Link.flags
_T_STATUS_MESSAGE = _tag(2, 2)           # Status.message
_T_STATUS_CODE = _tag(3, 0)              # Status.code
_T_KV_KEY = _tag(1, 2)                   # KeyValue.key
_T_KV_VALUE = _tag(2, 2)                 # KeyValue.value
_T_STRING = _tag(1, 2)                   # AnyValue.string_value
_T_BOOL = _tag(2, 0)                     # AnyValue.bool_value
_T_INT = _tag(3, 0)                      # AnyValue.int_value
_T_DOUBLE = _tag(4, 1)                   # AnyValue.double_value
_T_ARRAY = _tag(5, 2)                    # AnyValue.array_value
_T_KVLIST = _tag(6, 2)                   # AnyValue.kvlist_value
_T_BYTES = _tag(7, 2)                    # AnyValue.bytes_value
_T_VALUES = _tag(1, 2)                   # ArrayValue.values, KeyValueList.values

_EMPTY_ANY = b""
#: ``KeyValue.value`` fields: of a small non-negative int; the head of a double's
_SMALL_INTS = [_T_KV_VALUE + bytes((2, _T_INT[0], n)) for n in range(0x80)]
_DOUBLE_VALUE = _T_KV_VALUE + bytes((9,)) + _T_DOUBLE
_BOOLS = {True: _T_BOOL + b"\x01", False: _T_BOOL + b"\x00"}
_NO_PARENT_FLAGS = _T_FLAGS + _pack_fixed32(_HAS_IS_REMOTE)
_REMOTE_PARENT_FLAGS = _T_FLAGS + _pack_fixed32(_HAS_IS_REMOTE | _IS_REMOTE)
_KINDS = {0: _T_KIND + b"\x01", 1: _T_KIND + b"\x02", 2: _T_KIND + b"\x03",
          3: _T_KIND + b"\x04", 4: _T_KIND + b"\x05"}


def _any_value(value: Any) -> bytes:
    """The payload of an ``AnyValue`` holding ``value`` (the SDK's ``_encode_value``, in its
    order of type checks: a bool before an int, a str or bytes before a sequence)."""
    if value is None:
        return _EMPTY_ANY
    if isinstance(value, bool):
        return _BOOLS[value]
    if isinstance(value, str):
        return _field(_T_STRING, value.encode())
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise EncodingError(f"the int attribute value {value} does not fit in 64 bits")
        return _T_INT + _varint(value & _MASK64)
    if isinstance(value, float):
        return _T_DOUBLE + _pack_double(value)
    if isinstance(value, bytes):
        return _field(_T_BYTES, value)
    if isinstance(value, Sequence):
        return _field(_T_ARRAY, b"".join(
            [_field(_T_VALUES, _any_value(item)) for item in value]))
    if isinstance(value, Mapping):
        return _field(_T_KVLIST, b"".join(
            [_field(_T_VALUES, _key_value(str(k), v)) for k, v in value.items()]))
    raise EncodingError(f"an attribute value of type {type(value).__name__} has no OTLP "
                        "encoding")


def _key_value(key: str, value: Any) -> bytes:
    """The payload of a ``KeyValue`` (uncached)."""
    encoded_key = key.encode()
    head = _field(_T_KV_KEY, encoded_key) if encoded_key else b""
    return head + _field(_T_KV_VALUE, _any_value(value))


class SpanEncoder:
    """Encodes batches of ``ReadableSpan`` into ``ExportTraceServiceRequest`` bytes; made once
    per exporter (``TorenSpanExporter``) and called from its export thread. Its caches hold
    the encodings of the resources and scopes it has seen (by identity, so a resource object
    is encoded once) and of repeated short string attributes."""

    def __init__(self) -> None:
        self._kv: dict[bytes, dict[tuple[str, str], bytes]] = {}
        self._keys: dict[str, bytes] = {}
        self._resources: dict[int, tuple[Any, bytes, bytes]] = {}
        self._scopes: dict[int, tuple[Any, bytes, bytes]] = {}

    # -- attributes -----------------------------------------------------------------------------

    def _attributes(self, tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
        """Each attribute as a ``KeyValue`` field with ``tag``, joined: a (key, short string)
        pair from its cache whole; other values after the key's cached encoding."""
        if not attributes:
            return b""
        pairs = self._kv.get(tag)
        if pairs is None:
            pairs = self._kv[tag] = {}
        keys = self._keys
        out = []
        for key, value in attributes.items():
            kind = type(value)
            if kind is str and len(value) <= _CACHED_STRING_LEN:
                encoded = pairs.get((key, value))
                if encoded is None:
                    if len(pairs) >= _CACHE_LIMIT:
                        pairs.clear()
                    encoded = pairs[(key, value)] = _field(tag, _key_value(key, value))
                out.append(encoded)
                continue
            head = keys.get(key)
            if head is None:
                if len(keys) >= _CACHE_LIMIT:
                    keys.clear()
                encoded_key = key.encode()
                head = keys[key] = _field(_T_KV_KEY, encoded_key) if encoded_key else b""
            if kind is int and 0 <= value < 0x80:
                out.append(_field(tag, head + _SMALL_INTS[value]))
            elif kind is float:
                out.append(_field(tag, head + _DOUBLE_VALUE + _pack_double(value)))
            else:
                out.append(_field(tag, head + _field(_T_KV_VALUE, _any_value(value))))
        return b"".join(out)

    # -- resource and scope ---------------------------------------------------------------------

    def _resource(self, resource: Any) -> tuple[bytes, bytes]:
        """(the ``ResourceSpans.resource`` field, the ``schema_url`` field) of ``resource``."""
        hit = self._resources.get(id(resource))
        if hit is not None and hit[0] is resource:
            return hit[1], hit[2]
        payload = self._attributes(_T_RESOURCE_ATTRIBUTE, resource.attributes)
        schema_url = resource.schema_url
        encoded = (_field(_T_RS_RESOURCE, payload),
                   _field(_T_RS_SCHEMA_URL, schema_url.encode()) if schema_url else b"")
        if len(self._resources) >= 64:
            self._resources.clear()
        self._resources[id(resource)] = (resource, *encoded)  # held: its id stays its own
        return encoded

    def _scope(self, scope: Any) -> tuple[bytes, bytes]:
        """(the ``ScopeSpans.scope`` field, the ``schema_url`` field) of ``scope``."""
        hit = self._scopes.get(id(scope))
        if hit is not None and hit[0] is scope:
            return hit[1], hit[2]
        if scope is None:
            encoded = (_field(_T_SS_SCOPE, b""), b"")
        else:
            name, version = scope.name, scope.version
            payload = ((_field(_T_SCOPE_NAME, name.encode()) if name else b"")
                       + (_field(_T_SCOPE_VERSION, version.encode()) if version else b"")
                       + self._attributes(_T_SCOPE_ATTRIBUTE, scope.attributes))
            schema_url = scope.schema_url
            encoded = (_field(_T_SS_SCOPE, payload),
                       _field(_T_SS_SCHEMA_URL, schema_url.encode()) if schema_url else b"")
        if len(self._scopes) >= 64:
            self._scopes.clear()
        self._scopes[id(scope)] = (scope, *encoded)
        return encoded

    # -- spans ----------------------------------------------------------------------------------

    def _span(self, span: ReadableSpan) -> bytes:
        """The ``Span`` message of ``span`` (its payload, without the tag)."""
        context = span.context
        out = [_T_TRACE_ID, b"\x10", context.trace_id.to_bytes(16, "big"),
               _T_SPAN_ID, b"\x08", context.span_id.to_bytes(8, "big")]
        trace_state = context.trace_state
        if trace_state:
            out.append(_field(_T_TRACE_STATE, ",".join(
                [f"{key}={value}" for key, value in trace_state.items()]).encode()))
        parent = span.parent
        if parent is not None:
            out += (_T_PARENT_SPAN_ID, b"\x08", parent.span_id.to_bytes(8, "big"))
        name = span.name
        if name:
            out.append(_field(_T_NAME, name.encode()))
        out.append(_KINDS[span.kind.value])
        start, end = span.start_time, span.end_time
        if start:
            out += (_T_START, _pack_fixed64(start))
        if end:
            out += (_T_END, _pack_fixed64(end))
        attributes = span.attributes
        if attributes:
            out.append(self._attributes(_T_ATTRIBUTE, attributes))
        dropped = span.dropped_attributes
        if dropped:
            out += (_T_DROPPED_ATTRIBUTES, _varint(dropped))
        for event in span.events:
            out.append(_field(_T_EVENT, self._event(event)))
        dropped = span.dropped_events
        if dropped:
            out += (_T_DROPPED_EVENTS, _varint(dropped))
        for link in span.links:
            out.append(_field(_T_LINK, self._link(link)))
        dropped = span.dropped_links
        if dropped:
            out += (_T_DROPPED_LINKS, _varint(dropped))
        status = span.status
        if status is not None:
            code = status.status_code.value
            description = status.description
            out.append(_field(_T_STATUS, (
                (_field(_T_STATUS_MESSAGE, description.encode()) if description else b"")
                + (_T_STATUS_CODE + _varint(code) if code else b""))))
        out.append(_REMOTE_PARENT_FLAGS if parent is not None and parent.is_remote
                   else _NO_PARENT_FLAGS)
        return b"".join(out)

    def _event(self, event: Any) -> bytes:
        timestamp, name, dropped = event.timestamp, event.name, event.dropped_attributes
        return ((_T_EVENT_TIME + _pack_fixed64(timestamp) if timestamp else b"")
                + (_field(_T_EVENT_NAME, name.encode()) if name else b"")
                + self._attributes(_T_EVENT_ATTRIBUTE, event.attributes)
                + (_T_EVENT_DROPPED + _varint(dropped) if dropped else b""))

    def _link(self, link: Any) -> bytes:
        context, dropped = link.context, link.dropped_attributes
        encoded: bytes = (
            _T_LINK_TRACE_ID + b"\x10" + context.trace_id.to_bytes(16, "big")
            + _T_LINK_SPAN_ID + b"\x08" + context.span_id.to_bytes(8, "big")
            + self._attributes(_T_LINK_ATTRIBUTE, link.attributes)
            + (_T_LINK_DROPPED + _varint(dropped) if dropped else b"")
            + _T_LINK_FLAGS + _pack_fixed32(
                _HAS_IS_REMOTE | (_IS_REMOTE if context.is_remote else 0)))
        return encoded

    # -- the batch ------------------------------------------------------------------------------

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        """The serialized ``ExportTraceServiceRequest`` of ``spans``: grouped by resource,
        then scope (equal ones together, in order of first appearance) as the SDK does.

        Raises:
            EncodingError: a value the SDK's encoder would skip (the caller falls back to it).
        """
        # (id(resource), id(scope)) -> the list of encoded spans of the equal pair; the few
        # distinct objects of a batch are compared by equality once
        by_ids: dict[tuple[int, int], list[bytes]] = {}
        groups: dict[Any, dict[Any, list[bytes]]] = {}
        for span in spans:
            resource = span.resource
            scope = span.instrumentation_scope or None
            ids = (id(resource), id(scope))
            group = by_ids.get(ids)
            if group is None:
                group = groups.setdefault(resource, {}).setdefault(scope, [])
                by_ids[ids] = group
            group.append(_field(_T_SS_SPANS, self._span(span)))
        out = []
        for resource, scopes in groups.items():
            resource_field, resource_schema = self._resource(resource)
            scope_spans = []
            for scope, encoded in scopes.items():
                scope_field, scope_schema = self._scope(scope)
                scope_spans.append(_field(_T_RS_SCOPE_SPANS,
                                          scope_field + b"".join(encoded) + scope_schema))
            out.append(_field(_T_RESOURCE_SPANS,
                              resource_field + b"".join(scope_spans) + resource_schema))
        return b"".join(out)
