"""Events: the raw log as JSON, paged by seq, with every connector's bytes redacted."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from partbuild.api.errors import InvalidInput
from partbuild.api.models.common import MAX_PAGE, PageOut
from partbuild.api.models.events import StoredEventOut
from partbuild.api.service.as_of import page_at
from partbuild.api.service.base import ServiceBase
from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.log.store import parse_event
from partbuild.state.rules.redact import redacted

# What a bytes field of an event holds, for its redacted text. Every bytes field of an event is a
# connector's (a scan cursor, a token): none is ever shown raw.
_BYTES_KINDS = {"after_key": "ItemKey", "last_key": "ItemKey", "resume_token": "ResumeToken"}


class EventsService(ServiceBase):
    """Reads of the raw log."""

    def events(self, after_seq: int = 0, limit: int = 100) -> PageOut[StoredEventOut]:
        """Events after `after_seq`, as of the log's head when asked (events appended meanwhile wait for a page)."""
        if after_seq < 0 or not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"after_seq must be >= 0 and limit between 1 and {MAX_PAGE}")
        head = self.log.head()
        items = [
            StoredEventOut(
                seq=row.seq,
                event_id=row.event_id,
                event_type=row.event_type,
                recorded_at_ms=row.recorded_at_ms,
                event=event_out(parse_event(row.payload)),
            )
            for row in self.log.read(after_seq, limit)
            if row.seq <= head
        ]
        return page_at(items, limit, lambda e: str(e.seq), head)


# ----------------------------------------------------------------- records -> models


def event_out(event: pb.Event) -> dict[str, Any]:
    """An event as JSON for API answers, its bytes fields redacted (`ItemKey(len=N, hash=..)`)."""
    shown = MessageToDict(event, preserving_proto_field_name=True)
    _redact_bytes(event, shown)
    return shown


def _redact_bytes(message: Message, shown: dict[str, Any]) -> None:
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_BYTES:
            kind = _BYTES_KINDS.get(field.name, "Bytes")
            shown[field.name] = [redacted(kind, v) for v in value] if field.is_repeated else redacted(kind, value)
        elif (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and field.message_type is not None  # always, for a message field
            and not field.message_type.GetOptions().map_entry
        ):
            if field.is_repeated:
                for item, item_shown in zip(value, shown[field.name], strict=True):
                    _redact_bytes(item, item_shown)
            else:
                _redact_bytes(value, shown[field.name])
