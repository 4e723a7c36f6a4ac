"""The C decoder (``aiokpl._core._cdecoder``): built where the suite runs, chosen unless
``AIOKPL_NO_EXTENSIONS`` says otherwise, and the Python decoder's twin for any input, down to
its error messages. ``tests/test_aggregation.py`` runs every codec test with each decoder;
``tests/fuzz.py``'s aggregate target compares the two on every input it draws."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiokpl._core
from aiokpl._core import decoder, encoder, wire
from aiokpl.aggregation import AggregationFormatError, Record, Tag, decode, encode
from hostile import MIB, at_most_cpu_seconds, framed, hostile_aggregates

NATIVE = decoder.native_decoder({})

needs_native = pytest.mark.skipif(
    NATIVE is None, reason="the C decoder was not built here: test_the_c_decoder_is_built fails"
)


def test_the_c_decoder_is_built() -> None:
    """`make test` installs the package with a C compiler at hand (CI's machines have one), so
    the extension must be there: without this, the C decoder's tests would all be skipped."""
    assert NATIVE is not None, (
        "aiokpl._core._cdecoder is missing: reinstall (`pip install -e .`) and read the "
        "compiler's output (setup.py builds it as optional)"
    )


def test_the_process_uses_the_c_decoder_unless_told_not_to() -> None:
    assert (decoder.NATIVE is None) == bool(os.environ.get("AIOKPL_NO_EXTENSIONS"))
    if decoder.NATIVE is not None:
        assert decoder.parse_body is decoder.NATIVE.parse_body
        assert decoder.decode_tags is decoder.NATIVE.decode_tags


def test_aiokpl_no_extensions_chooses_the_python_decoder() -> None:
    assert decoder.native_decoder({"AIOKPL_NO_EXTENSIONS": "1"}) is None
    assert decoder.native_decoder({"AIOKPL_NO_EXTENSIONS": ""}) is NATIVE


def test_a_decoder_that_was_not_built_leaves_the_python_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(aiokpl._core, "_cdecoder", raising=False)
    monkeypatch.setitem(sys.modules, "aiokpl._core._cdecoder", None)  # import fails
    assert decoder.native_decoder({}) is None


def test_a_process_with_aiokpl_no_extensions_decodes_in_python() -> None:
    code = (
        "from aiokpl._core import decoder; from aiokpl.aggregation import Record, decode, encode;"
        "assert decoder.NATIVE is None and decoder.parse_body is decoder.parse_body_python;"
        "assert decode(encode([Record('k', b'x')])) == [Record('k', b'x')]; print('python')"
    )
    env = {**os.environ, "AIOKPL_NO_EXTENSIONS": "1"}
    ran = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert (ran.returncode, ran.stdout.strip()) == (0, "python"), ran.stderr


# -- the same reading as Python's -------------------------------------------------------------


def _read_by(parse: Callable[..., Any], *args: Any) -> Any:
    """What ``parse`` returns, or the message of the ``AggregationFormatError`` it raises."""
    try:
        return parse(*args)
    except AggregationFormatError as exc:
        return f"AggregationFormatError: {exc}"


def _assert_same_reading(body: bytes) -> None:
    """The C decoder reads ``body`` (framed) and ``body`` as encoded tags as Python does."""
    assert NATIVE is not None
    blob = framed(body)
    end = len(blob) - wire.DIGEST_SIZE
    python = _read_by(decoder._parse_general, blob, 4, end)
    assert _read_by(NATIVE.parse_body, blob, 4, end) == python
    assert _read_by(decoder.parse_body_python, blob, 4, end) == python
    assert _read_by(NATIVE.decode_tags, body) == _read_by(decoder.decode_tags_python, body)


@needs_native
@pytest.mark.parametrize("shape", list(hostile_aggregates(4096)))
def test_the_c_decoder_reads_every_hostile_shape_as_python_does(shape: str) -> None:
    body = hostile_aggregates(4096)[shape][4:-16]
    _assert_same_reading(body)
    for cut in (1, 2, 3, 7, len(body) // 2):  # and cut short: each a different error
        _assert_same_reading(body[:-cut])


# Bytes that mean something in the format: field tags, lengths, varint continuations, UTF-8.
MEANINGFUL = [0x0A, 0x12, 0x1A, 0x22, 0x08, 0x10, 0x18, 0x28, 0x29, 0x2A, 0x2B, 0x2D, 0x80,
              0xFF, 0x00, 0x01, 0x02, 0x03, 0x7F, 0xC3, 0xA9, 0xED, 0xA0]  # fmt: skip
SEEDS = [blob[4:-16] for blob in hostile_aggregates(512).values()] + [
    encode([Record("k", b"x", "7", (Tag("a", "b"), Tag("c")))])[4:-16],
    encode([Record(f"key-{i}", bytes(i), None, ()) for i in range(200)])[4:-16],
]


@st.composite
def mutated_bodies(draw: st.DrawFn) -> bytes:
    """A known body with a few bytes changed, inserted, deleted or cut off."""
    body = bytearray(draw(st.sampled_from(SEEDS)))
    rng = random.Random(draw(st.integers()))
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(body) + 1)
        what = rng.random()
        if what < 0.4 and body:
            body[min(at, len(body) - 1)] = rng.choice([*MEANINGFUL, rng.randrange(256)])
        elif what < 0.6:
            body[at:at] = bytes(rng.choice(MEANINGFUL) for _ in range(rng.randint(1, 4)))
        elif what < 0.8:
            del body[at : at + rng.randint(1, 8)]
        else:
            del body[at:]
    return bytes(body)


@needs_native
@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_bodies() | st.lists(st.sampled_from(MEANINGFUL), max_size=24).map(bytes))
def test_the_c_decoder_reads_any_body_as_python_does(body: bytes) -> None:
    _assert_same_reading(body)


@needs_native
@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            b"\x0a\x01a\x1a\x0d\x08" + b"\xff" * 9 + b"\x7f\x1a\x00",
            "record 0 refers to partition key 1180591620717411303423, but the partition key "
            "table has 1 entry",
            id="index-of-70-bits",
        ),
        pytest.param(
            b"\x0a\x01a\x1a\x0f\x08\x00\x10" + b"\xff" * 9 + b"\x01\x1a\x00",
            "record 0 refers to explicit hash key 18446744073709551615, but the explicit hash "
            "key table has 0 entries",
            id="index-of-64-bits",
        ),
        pytest.param(
            b"\x1a\x03\x08" + b"\x80" * 10,
            "varint at byte 7 is longer than 10 bytes",
            id="varint-of-11-bytes",
        ),
        pytest.param(
            b"\x80\x80\x80\x80\x80\x01",
            "field tag at byte 4 is longer than 5 bytes",
            id="tag-of-6-bytes",
        ),
    ],
)
def test_the_c_decoder_names_values_of_any_size_as_python_does(body: bytes, message: str) -> None:
    _assert_same_reading(body)
    assert NATIVE is not None
    assert _read_by(NATIVE.parse_body, framed(body), 4, len(body) + 4) == (
        f"AggregationFormatError: malformed aggregate body: {message}"
    )


@needs_native
def test_tags_the_c_decoder_makes_are_tags() -> None:
    """Built in C as tuple.__new__(Tag, ...) builds them: equal, hashed and shown the same."""
    assert NATIVE is not None
    tags = (Tag("k", "v"), Tag("é"), Tag("", ""))
    read = NATIVE.decode_tags(encoder.encode_tags(tags))
    assert read == tags
    assert [type(tag) for tag in read] == [Tag] * 3
    assert [hash(tag) for tag in read] == [hash(tag) for tag in tags]
    assert [repr(tag) for tag in read] == [repr(tag) for tag in tags]
    assert {read[0]: 1}[Tag("k", "v")] == 1
    assert read[1].key == "é"
    assert read[1].value is None


@needs_native
def test_the_c_decoder_refuses_what_is_not_bytes_in_range() -> None:
    assert NATIVE is not None
    blob = encode([Record("k", b"x")])
    with pytest.raises(TypeError):
        NATIVE.parse_body(bytearray(blob), 4, len(blob) - 16)
    with pytest.raises(TypeError):
        NATIVE.decode_tags(memoryview(b""))
    with pytest.raises(ValueError, match="inside buf"):
        NATIVE.parse_body(blob, 4, len(blob) + 1)
    with pytest.raises(ValueError, match="inside buf"):
        NATIVE.parse_body(blob, -1, 4)


@needs_native
def test_the_c_records_builder_refuses_what_it_cannot_number() -> None:
    assert NATIVE is not None
    assert NATIVE.records(Tag, 2, (["a", "b"], 5), 0b11) == [Tag("a", 5), Tag("b", 6)]  # type: ignore[arg-type]
    assert NATIVE.records(Tag, 1, ("k", None), 0b00) == [Tag("k")]
    with pytest.raises(TypeError, match="named tuple"):
        NATIVE.records(dict, 1, ("k", None), 0)
    with pytest.raises(ValueError, match="list or tuple of 3 items"):
        NATIVE.records(Tag, 3, (["a", "b"], None), 0b01)
    with pytest.raises(ValueError, match="numbers out of range"):
        NATIVE.records(Tag, 1, (-1, None), 0b01)
    with pytest.raises(TypeError):
        NATIVE.records(Tag, 1, ["k", None], 0)


@needs_native
@pytest.mark.parametrize("shape", list(hostile_aggregates(MIB)))
def test_the_c_decoder_reads_any_1_mib_record_in_milliseconds(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target is 50 ms for any 1 MiB record (docs/aggregation.md gives the figures,
    measured by `python -m bench --only codec`). This bounds the CPU time at 0.25 s: five times
    what the C decoder's worst shape takes on a loaded 2-core machine, where the Python decoder
    takes 0.3 to 0.5 s on a dozen of these shapes."""
    assert NATIVE is not None
    monkeypatch.setattr(decoder, "parse_body", NATIVE.parse_body)
    blob = hostile_aggregates(MIB)[shape]
    with at_most_cpu_seconds(0.25, f"decoding 1 MiB of {shape} in C"):
        records = decode(blob)
    assert records
