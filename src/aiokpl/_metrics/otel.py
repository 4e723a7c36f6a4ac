"""An OpenTelemetry sink for the producer's metrics (extra ``aiokpl[otel]``).

``opentelemetry-api`` is imported when the sink is opened, not before, so ``import aiokpl``
never needs it. Each KPL metric becomes four asynchronous instruments read by the SDK's
metric readers whenever they collect: cumulative counters of the values' count and sum, and
gauges of the last interval's minimum and maximum.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .._core.metrics import METRICS, MetricStatistics
from .recorder import RunningTotals, snake_case

if TYPE_CHECKING:
    from .._core.config import Config

__all__ = ("OpenTelemetrySink",)

_UNITS = {"Count": "1", "Bytes": "By", "Milliseconds": "ms"}  # UCUM, as OpenTelemetry wants


class OpenTelemetrySink:
    """Publishes the metrics as OpenTelemetry instruments (``pip install aiokpl[otel]``).

    For each KPL metric, e.g. ``UserRecordsPut``, four instruments on the meter ``"aiokpl"``:
    ``{prefix}.user_records_put.count`` and ``.sum`` (observable counters, cumulative since
    the producer started) and ``.min`` and ``.max`` (observable gauges of the last upload
    interval). Attributes: ``stream``, ``shard_id`` and ``error_code`` where the series has
    them; a series without ``stream`` sums up all streams, as in CloudWatch.

    Args:
        meter_provider: the provider to get the meter from; ``None`` for the global one.
        prefix: the first part of every instrument name.

    Raises:
        ImportError: at ``open``, when ``opentelemetry-api`` is not installed.
    """

    def __init__(self, *, meter_provider: Any = None, prefix: str = "aiokpl") -> None:
        self._provider = meter_provider
        self._prefix = prefix
        self.totals: RunningTotals = RunningTotals()
        self._instruments: list[Any] = []

    def __repr__(self) -> str:
        return f"<OpenTelemetrySink prefix={self._prefix!r} series={len(self.totals.series)}>"

    async def open(self, config: Config) -> None:
        """Create the instruments."""
        try:
            from opentelemetry import metrics
        except ImportError as exc:
            raise ImportError(
                "OpenTelemetrySink needs opentelemetry-api: pip install 'aiokpl[otel]'"
            ) from exc
        from .._version import __version__

        provider = self._provider or metrics.get_meter_provider()
        meter = provider.get_meter("aiokpl", __version__)
        for name, (unit, _) in METRICS.items():
            base = f"{self._prefix}.{snake_case(name)}"
            description = f"KPL metric {name}"
            self._instruments += [
                meter.create_observable_counter(
                    f"{base}.count", [self._callback(name, 0)], "1", description + ": values"
                ),
                meter.create_observable_counter(
                    f"{base}.sum", [self._callback(name, 1)], _UNITS[unit], description + ": sum"
                ),
                meter.create_observable_gauge(
                    f"{base}.min", [self._callback(name, 2)], _UNITS[unit], description + ": min"
                ),
                meter.create_observable_gauge(
                    f"{base}.max", [self._callback(name, 3)], _UNITS[unit], description + ": max"
                ),
            ]

    def _callback(self, name: str, index: int) -> Any:
        from opentelemetry.metrics import Observation

        def observe(options: Any) -> Iterable[Any]:
            return [Observation(values[index], labels) for labels, values in self.totals.of(name)]

        return observe

    async def publish(self, metrics: Sequence[MetricStatistics]) -> None:
        """Add one interval to the totals the instruments report."""
        self.totals.add(metrics)

    async def aclose(self) -> None:
        """Nothing to release: OpenTelemetry instruments live as long as their meter."""
