"""Four producer processes on one throttled 2-shard stream, without and with coordination.

The small-scale run of ``bench/coordination.py`` (``--quick``, 200 records/s per shard): the
loopback throttling server runs in a thread of this process, the store on moto's server, the
summarizer (``aiokpl coordinate``) and the producers in processes of their own; all are
stopped by the experiment's context managers whatever happens. About 55 s of wall time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.integration
@pytest.mark.scenario
def test_coordination_delivers_the_capacity_without_throttling_and_reconverges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.coordination import run

    experiment = run(quick=True, store="dynamodb", shard_rate=200.0)
    without, with_coordination = experiment.without, experiment.with_coordination
    summary = (
        f"without: {without.delivered_fraction:.1%} delivered, "
        f"{without.throttled_fraction:.2%} throttled, {without.expired} expired; "
        f"with: {with_coordination.delivered_fraction:.1%} delivered, "
        f"{with_coordination.throttled_fraction:.2%} throttled, "
        f"{with_coordination.expired} expired; "
        f"re-converged after {with_coordination.reconverged_after} s"
    )
    # Coordinated: the stream's capacity is used, and Kinesis throttles (almost) nothing.
    assert with_coordination.delivered_fraction >= 0.9, summary
    assert with_coordination.throttled_fraction <= 0.01, summary
    # Uncoordinated, the four producers together overshoot and are throttled.
    assert without.throttled_fraction > with_coordination.throttled_fraction, summary
    # One producer killed and another started: the ceilings settle again, well within 30 s
    # (the phase leaves 16 s after the swap; settled means for at least the last 3 s).
    assert with_coordination.reconverged_after is not None, summary
    assert with_coordination.reconverged_after <= 13.0, summary
