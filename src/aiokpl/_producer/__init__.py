"""The async producer and its put path: what a record crosses from ``put_record`` to the
stream's router, and what runs from the producer's start to its exit.

* :mod:`.producer`: :class:`~aiokpl.Producer`, the public API: its lifecycle, put paths,
  flush, statistics, metrics and health;
* :mod:`.admission`: what a put must pass (shared with ``SyncProducer``); a check returns the
  record, built;
* :mod:`.intake`: the way in of a checked record (stamped, marked, counted, routed);
* :mod:`.marks`: a record's place in the spool and its identity tag, given as it enters;
* :mod:`.runtime`: every part that exists only while the producer runs, built when it starts;
* :mod:`.streams`: the streams' pipelines, built on a first record and released when idle;
* :mod:`.port`: the way in of the records a ``SyncProducer``'s callers checked;
* :mod:`.health`: what the requests' answers say of the endpoint and each stream, and the
  producer's verdict;
* :mod:`.exit_report`: what a cancelled exit cost, said once.

The records and outcomes they carry (``aiokpl._record``, ``aiokpl._outcome``), the failure
callbacks (``aiokpl._failures``) and the spool's async shell (``aiokpl._spooling``) sit at the
package root: the pipeline, the metrics and the blocking API use them too.
"""
