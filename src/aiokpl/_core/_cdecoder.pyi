# The C decoder (_cdecoder.c): the same reading as decoder.py's general parser.
from typing import Any, TypeVar

from .canonical import Columns
from .wire import Tag

_R = TypeVar("_R", bound=tuple[Any, ...])

def parse_body(buf: bytes, pos: int, end: int, /) -> Columns: ...
def decode_tags(encoded: bytes, /) -> tuple[Tag, ...]: ...
def records(cls: type[_R], count: int, fields: tuple[Any, ...], varying: int, /) -> list[_R]: ...
