"""Hash keys and user-record validation (pure, synchronous)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokpl._core.errors import InvalidRecordError, InvalidRecordTypeError
from aiokpl._core.hashing import (
    KEYLESS,
    MAX_HASH_KEY,
    PLACED_PARTITION_KEY,
    check_explicit_hash_key,
    check_stream_name,
    check_user_record,
    hash_key_of,
    partition_key_length,
)

MiB = 1024 * 1024
keys = st.text(min_size=1, max_size=256).filter(
    lambda s: s.encode("utf-8", "ignore") == s.encode("utf-8", "surrogatepass")
)


def test_hash_key_is_big_endian_md5_of_utf8() -> None:
    # Known vector: md5(b"a") = 0cc175b9c0f1b6a831c399e269772661
    assert hash_key_of(b"a") == 0x0CC175B9C0F1B6A831C399E269772661
    assert hash_key_of("ü".encode()) == int(hashlib.md5("ü".encode()).hexdigest(), 16)


@given(keys)
def test_hash_key_in_range_and_matches_hexdigest(key: str) -> None:
    value = hash_key_of(key.encode())
    assert 0 <= value <= MAX_HASH_KEY
    assert value == int(hashlib.md5(key.encode()).hexdigest(), 16)


@given(st.integers(min_value=0, max_value=MAX_HASH_KEY))
def test_explicit_hash_key_round_trip(value: int) -> None:
    assert check_explicit_hash_key(str(value)) == value
    assert check_explicit_hash_key(value) == value


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "-1",
        "+1",
        " 1",
        "1 ",
        "01",
        "1_000",
        "1e3",
        "0x10",
        "\u0661",  # an Arabic-Indic digit: int() accepts it, Kinesis does not
        str(MAX_HASH_KEY + 1),
        "9" * 40,
    ],
)
def test_explicit_hash_key_rejects_non_decimal_or_out_of_range(bad: str) -> None:
    with pytest.raises(InvalidRecordError, match="explicit_hash_key"):
        check_explicit_hash_key(bad)


@pytest.mark.parametrize("bad", [-1, MAX_HASH_KEY + 1])
def test_explicit_hash_key_int_out_of_range(bad: int) -> None:
    with pytest.raises(InvalidRecordError, match=r"0 … 2\*\*128-1"):
        check_explicit_hash_key(bad)


@pytest.mark.parametrize("bad", [1.0, b"1", None, True])
def test_explicit_hash_key_wrong_type(bad: object) -> None:
    with pytest.raises(InvalidRecordTypeError, match="explicit_hash_key"):
        check_explicit_hash_key(bad)


def test_check_user_record_returns_canonical_values() -> None:
    values = check_user_record("user-42", b"payload", None, MiB)
    assert values == ("user-42", 14, b"payload", hash_key_of(b"user-42"), None)
    key, size, data, hash_key, ehk = check_user_record("k€", bytearray(b"xy"), 12345, MiB)
    assert type(data) is bytes
    assert (key, size, data, hash_key, ehk) == ("k€", 6, b"xy", 12345, "12345")


def test_bytes_are_not_copied_and_bytearray_is_snapshotted() -> None:
    payload = b"x" * 100
    assert check_user_record("k", payload, None, MiB)[2] is payload
    mutable = bytearray(b"abc")
    data = check_user_record("k", mutable, None, MiB)[2]
    mutable[0] = ord("z")
    assert data == b"abc"
    assert check_user_record("k", memoryview(b"mv"), None, MiB)[2] == b"mv"


def test_str_subclass_key_is_accepted_as_plain_str() -> None:
    class Key(str):
        pass

    key = check_user_record(Key("abc"), b"", None, MiB)[0]
    assert type(key) is str
    assert key == "abc"


@pytest.mark.parametrize(
    ("key", "error", "match"),
    [
        (
            "",
            InvalidRecordError,
            "partition_key must be 1 … 256 UTF-16 code units long, as Kinesis counts .*; got 0$",
        ),
        (
            "k" * 257,
            InvalidRecordError,
            "partition_key must be 1 … 256 UTF-16 code units long, as Kinesis counts .*; got 257$",
        ),
        (b"bytes", InvalidRecordTypeError, "partition_key must be a str, not bytes"),
        ("\ud800", InvalidRecordError, "UTF-8"),
    ],
)
def test_bad_partition_keys(key: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        check_user_record(key, b"data", None, MiB)


def test_a_record_without_a_partition_key() -> None:
    # Without an explicit hash key it is placed later (KEYLESS); its size counts the one byte
    # of the key it may be given, so that placing it changes nothing.
    assert check_user_record(None, bytearray(b"data"), None, MiB) == ("", 5, b"data", KEYLESS, None)
    # With one, that key routes it and it carries the placed key at once.
    assert check_user_record(None, b"data", 7, MiB) == (PLACED_PARTITION_KEY, 5, b"data", 7, "7")
    with pytest.raises(InvalidRecordError, match="data is 5 bytes, over max_record_size \\(5\\)"):
        check_user_record(None, b"12345", None, 5)
    assert check_user_record(None, b"1234", None, 5)[1] == 5
    with pytest.raises(InvalidRecordTypeError, match="data must be bytes"):
        check_user_record(None, "text", None, MiB)
    with pytest.raises(InvalidRecordError, match="explicit_hash_key must be in"):
        check_user_record(None, b"d", -1, MiB)


def test_partition_keys_are_counted_in_utf16_code_units_as_kinesis_counts() -> None:
    # An emoji is one code point but two UTF-16 code units (and 4 UTF-8 bytes).
    assert partition_key_length("\U0001f600" * 128) == 256
    assert partition_key_length("k" * 200) == 200
    assert partition_key_length("€" * 256) == 256
    assert check_user_record("\U0001f600" * 128, b"", None, MiB)[1] == 512
    assert check_user_record("k" + "\U0001f600" * 127 + "k", b"", None, MiB)[1] == 510
    for key, units in [
        ("\U0001f600" * 129, 258),
        ("\U0001f600" * 200, 400),
        ("k" + "\U0001f600" * 128, 257),
    ]:
        with pytest.raises(InvalidRecordError, match=f"UTF-16 code units long.*; got {units}$"):
            check_user_record(key, b"", None, MiB)


def test_256_characters_of_multibyte_text_are_allowed() -> None:
    key = "€" * 256
    assert check_user_record(key, b"", None, MiB)[1] == len(key.encode()) == 768


@pytest.mark.parametrize("data", ["text", 5, None, [1, 2]])
def test_data_must_be_bytes_like(data: object) -> None:
    with pytest.raises(InvalidRecordTypeError, match="data must be bytes, bytearray or memoryview"):
        check_user_record("k", data, None, MiB)


def test_str_data_error_suggests_encoding() -> None:
    with pytest.raises(InvalidRecordTypeError, match=r"encode it first"):
        check_user_record("k", "text", None, MiB)


def test_size_limit_counts_key_and_data() -> None:
    assert check_user_record("kk", b"x" * (MiB - 2), None, MiB)
    with pytest.raises(
        InvalidRecordError, match=r"1048577 bytes, over max_record_size \(1048576\)"
    ):
        check_user_record("kk", b"x" * (MiB - 1), None, MiB)
    with pytest.raises(InvalidRecordError, match="max_record_size"):
        check_user_record("€", b"x" * (MiB - 2), None, MiB)  # the key is 3 bytes in UTF-8


def test_bad_explicit_hash_key_in_record() -> None:
    with pytest.raises(InvalidRecordError, match="explicit_hash_key"):
        check_user_record("k", b"", "abc", MiB)


@pytest.mark.parametrize("name", ["s", "my-stream_1.0", "x" * 128])
def test_good_stream_names(name: str) -> None:
    assert check_stream_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 129, "has space", "slash/", "ünï"])
def test_bad_stream_names(name: str) -> None:
    with pytest.raises(InvalidRecordError, match="stream must be 1 … 128 characters"):
        check_stream_name(name)


def test_stream_name_type() -> None:
    with pytest.raises(InvalidRecordTypeError, match="stream must be a str, not NoneType"):
        check_stream_name(None)
