"""The blocking API: :class:`~aiokpl.SyncProducer`, a :class:`~aiokpl.Producer` on a background
event loop, for code that is not async.

Modules, from a caller's thread to the loop's:

* :mod:`.producer`: ``SyncProducer``, the public class: each method one crossing between a
  caller's thread and the loop, and the producer's life (start, close, abandon);
* :mod:`.futures`: ``RecordFuture``, the ``concurrent.futures.Future`` a put returns, one light
  object until something needs it as a whole ``Future``;
* :mod:`.handover`: what the callers' threads and the loop share, under one lock: the queue of
  checked records, the room they hold, the flushes waiting, the wake-up and the closing state;
* :mod:`.loop`: the background thread: its event loop, the producer it hosts, the pump that
  moves the queue into it, the resolution of each record's future;
* :mod:`.portal`: what a caller's thread asks the loop and waits for (statistics, health, the
  durable wait), through the loop's blocking portal;
* :mod:`.exit`: how a ``SyncProducer`` ends when nobody closes it, or when a Ctrl-C interrupts
  its close;
* :mod:`.executor`: the loop's default executor, one that still runs at interpreter exit.
"""
