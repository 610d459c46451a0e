"""Traces out: the ledger as OpenTelemetry/OpenInference spans, trace statistics and diagnosis (RFC 0007)."""
