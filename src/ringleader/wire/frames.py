"""What a frame is, and the errors of the wire.

Every frame is one line. Its first byte says what it is, so routing never depends on how a
message happens to be encoded: `{` starts a JSON control message (an object with a "type"
field; ringleader.wire.messages gives each type its fields), `O` starts a batch of rank output
lines (JSON after the byte), relayed and printed from its encoded form without being decoded on
the way.
"""

import json
from typing import Any

from ringleader.core.jsontext import parse_json

JsonObject = dict[str, Any]
OUTPUT_FRAME = b"O"  # first byte of an output frame: O{"rank", "host", "stream", "lines"}
_CONTROL_FRAME = b"{"


class ChannelClosed(Exception):
    """The peer closed the connection or it broke."""


class ProtocolError(ChannelClosed):
    """The peer sent something that is not a frame of this protocol."""


def is_output(frame: bytes) -> bool:
    return frame.startswith(OUTPUT_FRAME)


def output_frame(batch: JsonObject) -> bytes:
    return OUTPUT_FRAME + _dumps(batch)


def decode_output(frame: bytes) -> JsonObject:
    return _decode_object(frame[len(OUTPUT_FRAME) :])


def control_frame(message: JsonObject) -> bytes:
    """A control frame for a JSON object (without the newline that ends every frame)."""
    return _dumps(message)


def decode(frame: bytes) -> JsonObject:
    """A control frame's JSON object, with a string "type"; its fields are not checked here."""
    if not frame.startswith(_CONTROL_FRAME):
        raise ProtocolError(f"unknown frame kind: {frame[:100]!r}")
    message = _decode_object(frame)
    if not isinstance(message.get("type"), str):
        raise ProtocolError(f"message without a type: {frame[:100]!r}")
    return message


def _dumps(value: JsonObject) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _decode_object(data: bytes) -> JsonObject:
    try:
        message = parse_json(data.decode())
    except ValueError as error:  # UnicodeDecodeError included
        raise ProtocolError(f"garbled message: {data[:100]!r}") from error
    if not isinstance(message, dict):
        raise ProtocolError(f"garbled message: {data[:100]!r}")
    return message
