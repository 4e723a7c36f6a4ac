"""Coordination I/O around the pure ``_core.coordination`` math.

``coordinator`` holds the stores, each producer's coordination task and the summarizer loop.
The public names are re-exported by ``aiokpl.coordination``.
"""
