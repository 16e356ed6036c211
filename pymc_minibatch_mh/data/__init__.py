"""Package data: the precomputed Barker correction table."""
