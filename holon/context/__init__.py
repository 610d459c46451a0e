"""Context assembly: every prompt composed from memory layers within one token budget (RFC 0003)."""
