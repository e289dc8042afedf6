"""OpenTelemetry tracing for Toren: the ``otel`` driver of ``toren.tracer``."""
