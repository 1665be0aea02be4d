"""The config's view of URL redaction, which lives in tq_gc/redaction.py: the state package and the
trainer kit use it without loading the config (pydantic)."""

from tq_gc.redaction import REDACTED, redact_text, redact_url

__all__ = ["REDACTED", "redact_text", "redact_url"]
