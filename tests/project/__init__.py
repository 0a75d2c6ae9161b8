"""The repository's own checks: the README and guide run as written, docs, packaging, typing, tooling, size."""
