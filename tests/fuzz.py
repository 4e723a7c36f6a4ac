"""Fuzz targets (issue 33, hostile bytes): the aggregate decoder, the ``Deduper``'s stored
state and the spool's reader, fed any bytes.

Each target takes one input and checks what must hold for any input: the code returns or
raises the errors it documents, never another exception, and what it returns is consistent
(the decoder's fast path agrees with its general parser, the C decoder with the Python one
down to its error messages, a decoded aggregate encodes and decodes back to itself, a spool
that recovery repaired is clean and every record it keeps decodes). Inputs are at most
:data:`MAX_INPUT_BYTES`; the work on each is bounded by libFuzzer's ``-timeout`` and
``-rss_limit_mb`` (atheris), or by Hypothesis's deadline.

Run ``make fuzz`` (``FUZZ_SECONDS`` per target, 60 by default), or::

    python tests/fuzz.py --seconds 60 [aggregate] [deduper-state] [spool-segment]

With atheris installed (``make fuzz`` installs the ``fuzz`` dependency group, where the
machine has a wheel for its Python), each target runs coverage-guided in a process of its
own, its corpus kept in ``.cache/fuzz/TARGET`` and seeded with the shapes of
``tests/hostile.py``; a crash is written to ``.cache/fuzz/TARGET-crash-*`` and ends the run
with status 1. Without atheris, Hypothesis draws the inputs (random and structured ones) for
the same time. The suite runs every target for a moment (``tests/test_fuzz.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import logging
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hostile
from aiokpl import aggregation
from aiokpl._cli.spool import _entry_fields
from aiokpl._core import canonical, decoder, encoder
from aiokpl._dedupe import Deduper
from aiokpl._spool import format as spool_format
from aiokpl._spool import recovery
from aiokpl.testing._spool_files import MemoryFiles

MAX_INPUT_BYTES = 4096
"""The largest input a target is given: enough for every structure, small enough that each
input runs in milliseconds (the decoder's work is linear in its input, tests/hostile.py)."""

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / ".cache" / "fuzz"


# -- the targets ----------------------------------------------------------------------------


def aggregate(data: bytes) -> None:
    """``data`` as an aggregate's body (framed, so its digest matches), and as encoded tags."""
    blob = hostile.framed(data)
    end = len(blob) - 16
    try:
        fast = canonical.parse_canonical(blob, 4, end)
    except (IndexError, UnicodeDecodeError, aggregation.AggregationFormatError):
        fast = None
    try:
        general = decoder._parse_general(blob, 4, end)
    except aggregation.AggregationFormatError:
        general = None
        assert fast is None, "the fast path read a body the general parser refuses"
    if fast is not None:  # the fast path never finds what the general parser would not
        assert fast == general
    if NATIVE is not None:  # the C decoder reads every body as the Python one does
        assert _read_by(NATIVE.parse_body, blob, 4, end) == _read_by(
            decoder._parse_general, blob, 4, end
        )
        assert _read_by(NATIVE.decode_tags, data) == _read_by(decoder.decode_tags_python, data)
    record = {"Data": blob, "PartitionKey": "p", "SequenceNumber": "1"}
    try:
        records = aggregation.decode(blob)
    except aggregation.AggregationFormatError:
        assert general is None
        try:
            aggregation.deaggregate(record)
        except aggregation.AggregationFormatError:
            pass
        else:
            raise AssertionError("deaggregate read a body decode refuses")
    else:
        assert general is not None
        if records:  # an aggregate of none decodes, but is never encoded
            assert aggregation.decode(aggregation.encode(records)) == records
        users = aggregation.deaggregate(record)
        if data:  # an empty body is an ordinary record to deaggregate (docs/aggregation.md)
            assert [(u.partition_key, u.data, u.explicit_hash_key, u.tags) for u in users] == (
                records
            )
        with contextlib.suppress(aggregation.AggregationFormatError):  # a key not decimal
            kept = aggregation.deaggregate(record, shard=(0, 2**127))
            assert all(u in users for u in kept)
    with contextlib.suppress(aggregation.AggregationFormatError):
        read = decoder.decode_tags(data)
        assert decoder.decode_tags(encoder.encode_tags(read)) == read


NATIVE = decoder.native_decoder({})
"""The C decoder, when it was built here: compared with the Python one on every input."""


def _read_by(parse: Callable[..., Any], *args: Any) -> Any:
    """What ``parse`` returns, or the message of the ``AggregationFormatError`` it raises."""
    try:
        return parse(*args)
    except aggregation.AggregationFormatError as exc:
        return f"AggregationFormatError: {exc}"


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # a warning per unreadable state: millions when fuzzing
    try:
        yield
    finally:
        logger.setLevel(level)


def deduper_state(data: bytes) -> None:
    """``data`` as the document a ``Deduper``'s store holds, raw and compressed in it.

    The ``Deduper`` loads it or starts empty, counting a state error (it raises nothing for
    a document it cannot read); what it loaded saves and loads back the same.
    """
    for document in (data, _document_around(data)):
        with _quiet("aiokpl.dedupe"):
            deduper = Deduper(window=64, max_producers=4, store=hostile.MemoryStore(document))
        statistics = deduper.statistics
        if statistics.state_errors:
            assert statistics.producers == 0
            continue
        saved = deduper.dumps()
        again = Deduper(window=64, max_producers=4, store=hostile.MemoryStore(saved))
        assert again.statistics.state_errors == 0
        assert again.dumps() == saved


def _document_around(data: bytes) -> bytes:
    """A well-formed document whose one producer's window is ``data`` (compressed, base64):
    the part of the format raw bytes rarely reach."""
    import base64

    packed = base64.b64encode(zlib.compress(data[:8])).decode()
    high = int.from_bytes(data[8:16] or b"\x01", "little")
    return (
        '{"format":"aiokpl.deduper","version":1,"window":64,"producers":'
        f'[["AAAAAAAAAAAAAAAAAAAAAA",{high},"{packed}"]]}}'
    ).encode()


PRODUCER_ID = bytes(range(16))


def spool_segment(data: bytes) -> None:
    """``data`` as a segment: its frames (the first byte's low bit says which reading).

    Low bit 0: the bytes after a valid header, as they are (the framing and CRC checks).
    Low bit 1: bodies, each a length byte and that many bytes, framed with valid CRCs (what
    a writer's bug or a crafted file can hold: entries whose CRC checks).

    Recovery never raises; checking finds what repairing does; a repaired spool is clean and
    every record it keeps decodes; ``dump``'s reading of each frame raises nothing either.
    """
    if not data:
        return
    if data[0] & 1:
        frames = b"".join(_framed(body) for body in _bodies(data[1:]))
    else:
        frames = data[1:]
    segment = spool_format.encode_header(PRODUCER_ID) + frames
    files = MemoryFiles()
    files.makedirs("/spool")
    files.write_file(f"/spool/{spool_format.segment_name(0)}", segment)
    checked = recovery.scan("/spool", files, repair=False).statistics
    repaired = recovery.scan("/spool", files)
    assert repaired.statistics == checked
    replayed = list(repaired.unresolved())
    assert len(replayed) == checked.records_recovered
    after = recovery.scan("/spool", files).statistics
    assert not after.corrupt
    assert (after.torn_tails, after.records_recovered) == (0, checked.records_recovered)
    for frame in recovery.walk(segment, PRODUCER_ID):
        if frame.status is not spool_format.FrameStatus.END:
            _entry_fields("x.seg", frame, len(segment))


def _bodies(data: bytes) -> Iterator[bytes]:
    while data:
        n = data[0]
        yield data[1 : 1 + n]
        data = data[1 + n :]


def _framed(body: bytes) -> bytes:
    """A frame around ``body`` with a correct length word and CRC (docs/spool.md)."""
    check = zlib.crc32(len(body).to_bytes(3, "little")) & 0xFF
    length = (len(body) | check << 24).to_bytes(4, "little")
    return length + zlib.crc32(body, zlib.crc32(length)).to_bytes(4, "little") + body


TARGETS: dict[str, Callable[[bytes], None]] = {
    "aggregate": aggregate,
    "deduper-state": deduper_state,
    "spool-segment": spool_segment,
}


# -- seeds ----------------------------------------------------------------------------------


def seeds(target: str) -> list[bytes]:
    """Inputs a corpus starts from: each shape of ``tests/hostile.py``, small."""
    if target == "aggregate":
        bodies = [blob[4:-16] for blob in hostile.hostile_aggregates(512).values()]
        tagged = aggregation.encode(
            [("k", b"x", "1", [("a", "b"), ("aiokpl.id", "AAAAAAAAAAAAAAAAAAAAAA.7")])]
        )
        return [*bodies, tagged[4:-16]]
    if target == "deduper-state":
        deduper = Deduper(window=64, max_producers=4)
        record = aggregation.DeaggregatedRecord(
            "k",
            b"x",
            None,
            None,
            0,
            True,
            None,
            (aggregation.Tag("aiokpl.id", "AAAAAAAAAAAAAAAAAAAAAA.70"),),
        )
        deduper.commit([record])
        return [deduper.dumps(), bytes(16)]
    records = [
        spool_format.encode_record_fields(i, 1.0, "s", "k", None, b"x", b'"\x02\n\x00')
        for i in range(3)
    ]
    outcome = spool_format.AckOutcome.DELIVERED
    ack = spool_format.encode_ack(spool_format.SpoolAck(PRODUCER_ID, outcome, ((0, 1),)))
    bodies = [frame[8:] for frame in [*records, ack]]
    return [
        b"\x00" + b"".join(records) + ack,
        b"\x01" + b"".join(bytes([len(body)]) + body for body in bodies),
    ]


# -- running --------------------------------------------------------------------------------


def _atheris() -> Any:
    """The atheris module, or ``None`` where it is not installed."""
    try:
        return importlib.import_module("atheris")
    except ImportError:
        return None


# The child process of one target: aiokpl is imported inside atheris's instrumentation (and
# only aiokpl: instrumenting everything loaded, Hypothesis included, took minutes).
_ATHERIS_CHILD = """
import sys
import atheris
sys.path.insert(0, sys.argv[1])
with atheris.instrument_imports(include=["aiokpl"]):
    import fuzz
sys.exit(fuzz.run_atheris(sys.argv[2], int(sys.argv[3])))
"""


def run_atheris(target: str, seconds: int) -> int:
    """One target under libFuzzer in this process (it exits when done)."""
    atheris = _atheris()
    corpus = CORPUS / target
    corpus.mkdir(parents=True, exist_ok=True)
    for seed in seeds(target):
        (corpus / f"seed-{hashlib.sha1(seed).hexdigest()}").write_bytes(seed)
    arguments = [
        "fuzz.py",
        f"-max_total_time={seconds}",
        f"-max_len={MAX_INPUT_BYTES}",
        "-timeout=10",  # seconds per input
        "-rss_limit_mb=2048",
        f"-artifact_prefix={CORPUS}/{target}-",
        "-print_final_stats=1",
        str(corpus),
    ]
    atheris.Setup(arguments, TARGETS[target])
    atheris.Fuzz()
    return 0  # pragma: no cover - libFuzzer exits the process


def inputs(target: str) -> st.SearchStrategy[bytes]:
    """Hypothesis's inputs for ``target``: any bytes, and its seeds with a few bytes changed."""
    return st.binary(max_size=MAX_INPUT_BYTES) | st.sampled_from(seeds(target)).flatmap(mutations)


def mutations(seed: bytes) -> st.SearchStrategy[bytes]:
    """``seed`` with a few bytes changed, removed or inserted."""

    @st.composite
    def mutated(draw: st.DrawFn) -> bytes:
        data = bytearray(seed)
        for _ in range(draw(st.integers(0, 4))):
            i = draw(st.integers(0, len(data)))
            action = draw(st.sampled_from(["set", "delete", "insert"]))
            if action == "set" and i < len(data):
                data[i] = draw(st.integers(0, 255))
            elif action == "delete":
                del data[i : i + draw(st.integers(1, 4))]
            else:
                data[i:i] = draw(st.binary(min_size=1, max_size=4))
        return bytes(data[:MAX_INPUT_BYTES])

    return mutated()


def run_hypothesis(target: str, seconds: float) -> None:
    """One target with Hypothesis's inputs, batch after batch, for ``seconds``."""

    @settings(
        max_examples=500,
        deadline=10_000,  # milliseconds per input
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(inputs(target))
    def batch(data: bytes) -> None:
        TARGETS[target](data)

    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        batch()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=", ".join(TARGETS))
    parser.add_argument("--seconds", type=int, default=60, help="per target (default 60)")
    parser.add_argument("--hypothesis", action="store_true", help="even with atheris installed")
    args = parser.parse_args(argv)
    targets = args.targets or list(TARGETS)
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {', '.join(unknown)}: the targets are {', '.join(TARGETS)}")
    if _atheris() is None or args.hypothesis:
        print("fuzzing with Hypothesis (atheris is not installed, or --hypothesis)", flush=True)
        for target in targets:
            print(f"{target}: {args.seconds} s", flush=True)
            run_hypothesis(target, args.seconds)
        return 0
    status = 0
    for target in targets:
        print(f"{target}: {args.seconds} s, coverage-guided (atheris)", flush=True)
        here = str(Path(__file__).resolve().parent)
        child = [sys.executable, "-c", _ATHERIS_CHILD, here, target, str(args.seconds)]
        status |= subprocess.run(child, check=False).returncode
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
