"""Async shells around the pure core, one module per stage, in pipeline order."""
