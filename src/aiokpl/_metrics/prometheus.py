"""A Prometheus sink for the producer's metrics (extra ``aiokpl[prometheus]``).

``prometheus_client`` is imported when the sink is opened, not before, so ``import aiokpl``
never needs it. The sink registers one collector; a scrape reads the totals of the intervals
published so far.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .._core.metrics import METRICS, MetricStatistics
from .recorder import RunningTotals, snake_case

if TYPE_CHECKING:
    from .._core.config import Config

__all__ = ("PrometheusSink",)

_LABELS = ("stream", "shard_id", "error_code")


class PrometheusSink:
    """Exposes the metrics to Prometheus through ``prometheus_client``
    (``pip install aiokpl[prometheus]``).

    Each KPL metric, e.g. ``UserRecordsPut``, becomes a summary ``{prefix}_user_records_put``
    (``_count`` and ``_sum``, cumulative since the producer started) and two gauges,
    ``..._min`` and ``..._max``, of the last upload interval. Labels: ``stream``,
    ``shard_id`` and ``error_code``, empty where the series has no such dimension; the
    series with an empty ``stream`` sums up all streams, as in CloudWatch, so aggregate one
    level at a time. Serve the registry as usual (e.g. ``prometheus_client.start_http_server``).

    Args:
        registry: the ``CollectorRegistry`` to register in; ``None`` for the default one.
        prefix: the first part of every metric name.

    Raises:
        ImportError: at ``open``, when ``prometheus_client`` is not installed.
    """

    def __init__(self, *, registry: Any = None, prefix: str = "aiokpl") -> None:
        self._registry = registry
        self._prefix = prefix
        self.totals: RunningTotals = RunningTotals()
        self._registered: Any = None

    def __repr__(self) -> str:
        return f"<PrometheusSink prefix={self._prefix!r} series={len(self.totals.series)}>"

    async def open(self, config: Config) -> None:
        """Register the collector."""
        try:
            import prometheus_client
        except ImportError as exc:
            raise ImportError(
                "PrometheusSink needs prometheus_client: pip install 'aiokpl[prometheus]'"
            ) from exc
        registry = self._registry or prometheus_client.REGISTRY
        registry.register(self)
        self._registered = registry

    def describe(self) -> list[Any]:
        """Nothing up front (series appear with data); prometheus_client calls this."""
        return []

    def collect(self) -> Iterator[Any]:
        """The metric families of a scrape; prometheus_client calls this."""
        from prometheus_client.core import GaugeMetricFamily, SummaryMetricFamily

        for name, (unit, _) in METRICS.items():
            series = self.totals.of(name)
            if not series:
                continue
            base = f"{self._prefix}_{snake_case(name)}"
            text = f"KPL metric {name} ({unit})"
            summary = SummaryMetricFamily(base, text, labels=_LABELS)
            low = GaugeMetricFamily(
                f"{base}_min", text + ", last interval's minimum", labels=_LABELS
            )
            high = GaugeMetricFamily(
                f"{base}_max", text + ", last interval's maximum", labels=_LABELS
            )
            for labels, (count, total, minimum, maximum) in series:
                values = [labels.get(label, "") for label in _LABELS]
                summary.add_metric(values, count_value=int(count), sum_value=total)
                low.add_metric(values, minimum)
                high.add_metric(values, maximum)
            yield summary
            yield low
            yield high

    async def publish(self, metrics: Sequence[MetricStatistics]) -> None:
        """Add one interval to the totals a scrape reports."""
        self.totals.add(metrics)

    async def aclose(self) -> None:
        """Unregister the collector."""
        registry, self._registered = self._registered, None
        if registry is not None:
            registry.unregister(self)
