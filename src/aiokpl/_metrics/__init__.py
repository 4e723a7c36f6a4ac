"""Metrics around the pipeline: the recorder and the sinks it hands its windows to.

``recorder`` counts what the pipeline reports into the pure ``_core.metrics`` tables, samples,
and pushes each closed window to the sinks (``CloudWatchSink`` there too); ``otel`` and
``prometheus`` are the pull-style sinks, each importing its client library only when built.
The public names are re-exported by ``aiokpl``.
"""
