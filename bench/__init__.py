"""Benchmarks of SPEC §6: ``python -m bench`` (or ``make bench``) runs every scenario.

Each scenario compares side by side, in the same process run, against a reference (a bare loop,
AWS's ``aws_kinesis_agg``, the server's capacity, the buffered-time setting, a byte budget) and
reports ratios, because the machines these run on are shared and noisy: an absolute figure from
one run says little, a ratio of two figures measured a second apart says much more.

Modules: ``pipeline`` (pipeline ceiling on asyncio, trio and uvloop), ``codec``, ``saturation``,
``latency``, ``memory``, and ``report`` (the table and the JSON file). See
``docs/performance.md``.
"""
