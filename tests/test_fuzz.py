"""The fuzz targets of ``tests/fuzz.py`` for a moment (a few seconds in all): their seeds, then
Hypothesis's inputs (any bytes, and the seeds with a few bytes changed). ``make fuzz`` runs
them for longer, coverage-guided where atheris installs. Each input is at most
``fuzz.MAX_INPUT_BYTES``; run on the code before issue 33, the spool and aggregate targets
failed within seconds (a tag cut short raised ``IndexError``; a time past year 9999 stopped
``dump``)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

import fuzz

EXAMPLES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("target", list(fuzz.TARGETS))
def test_every_seed_passes(target: str) -> None:
    for seed in fuzz.seeds(target):
        fuzz.TARGETS[target](seed)


@EXAMPLES
@given(fuzz.inputs("aggregate"))
def test_the_aggregate_decoder_takes_any_body(data: bytes) -> None:
    fuzz.aggregate(data)


@EXAMPLES
@given(fuzz.inputs("deduper-state"))
def test_the_deduper_loads_any_stored_state_or_starts_empty(data: bytes) -> None:
    fuzz.deduper_state(data)


@EXAMPLES
@given(fuzz.inputs("spool-segment"))
def test_recovery_takes_any_segment(data: bytes) -> None:
    fuzz.spool_segment(data)


def test_the_fuzz_command_runs_each_target_for_its_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz.main(["--hypothesis", "--seconds", "0", "aggregate", "spool-segment"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["aggregate: 0 s", "spool-segment: 0 s"]
    with pytest.raises(SystemExit):
        fuzz.main(["nothing"])
