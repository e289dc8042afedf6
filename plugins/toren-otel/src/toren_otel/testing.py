"""A local OTLP/HTTP trace receiver for tests of toren-otel and of Toren's traces: it decodes
every ``POST /v1/traces`` (protobuf, gzip or not) and keeps the requests, their headers and
their spans, so a test asserts on what a real collector would have received."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OtlpReceiver:
    """Listens on 127.0.0.1 at a free port from construction until ``close``. ``url`` is the
    base (``OTEL_EXPORTER_OTLP_ENDPOINT``), ``traces_url`` the traces endpoint
    (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    receiver.headers.append(dict(self.headers))
                    receiver.requests.append(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.traces_url = f"{self.url}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[dict[str, Any]]:
        """Every span received so far: name, trace, span and parent ids (ints), attributes
        (plain values) and event names."""
        with self.lock:
            requests = list(self.requests)
        return [{"name": span.name,
                 "trace_id": int.from_bytes(span.trace_id, "big"),
                 "span_id": int.from_bytes(span.span_id, "big"),
                 "parent_id": int.from_bytes(span.parent_span_id, "big")
                 if span.parent_span_id else None,
                 "attributes": {a.key: _value(a.value) for a in span.attributes},
                 "events": [event.name for event in span.events]}
                for request in requests for resource in request.resource_spans
                for scope in resource.scope_spans for span in scope.spans]

    def named(self, prefix: str) -> list[dict[str, Any]]:
        """The spans received so far whose name starts with ``prefix``."""
        return [span for span in self.spans() if span["name"].startswith(prefix)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None
