"""Coordination of many producer processes writing the same shards (see docs/coordination.md).

Each producer publishes its admitted per-shard rates to a shared store; one summarizer adds
them up; each producer moves its per-shard ceilings toward its share of the shard's capacity.
"""

from ._coordination.coordinator import Coordination as Coordination
from ._coordination.coordinator import run_summarizer as run_summarizer
from ._coordination.stores import CoordinationStore as CoordinationStore
from ._coordination.stores import DynamoDBStore as DynamoDBStore
from ._coordination.stores import S3Store as S3Store
from ._public import present_as_public as _present_as_public

__all__ = ("Coordination", "CoordinationStore", "DynamoDBStore", "S3Store", "run_summarizer")

# Tracebacks and reprs name aiokpl.coordination.X, the name to import, not the private module.
_present_as_public(__name__, globals(), __all__)
