"""Coordination of many producer processes writing the same shards (see docs/coordination.md).

Each producer publishes its admitted per-shard rates to a shared store; one summarizer adds
them up; each producer moves its per-shard ceilings toward its share of the shard's capacity.
"""

from ._coordination.coordinator import Coordination as Coordination
from ._coordination.coordinator import CoordinationStore as CoordinationStore
from ._coordination.coordinator import DynamoDBStore as DynamoDBStore
from ._coordination.coordinator import S3Store as S3Store
from ._coordination.coordinator import run_summarizer as run_summarizer

__all__ = ("Coordination", "CoordinationStore", "DynamoDBStore", "S3Store", "run_summarizer")
