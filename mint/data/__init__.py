"""Episodes: the canonical schema, format readers, PII scrubbing, ingest and dataset versions."""
