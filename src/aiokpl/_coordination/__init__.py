"""Coordination I/O around the pure ``_core.coordination`` math.

``stores`` holds the store protocol and the S3 and DynamoDB stores; ``coordinator`` the
``Coordination`` settings, each producer's coordination task and the summarizer loop, which
use a store. The public names are re-exported by ``aiokpl.coordination``.
"""
