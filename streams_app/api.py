"""REST endpoints of the live record."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from sessions_app.http import query_input
from sessions_app.rest import HelixAPIView
from sessions_app.selectors import session_for_user
from sessions_app.stores.rules import MAX_POSITION
from streams_app.backends import get_stream_manager
from streams_app.errors import StreamNotFound


class SequencedChunkOutput(serializers.Serializer):
    sequence = serializers.IntegerField()
    chunk = serializers.JSONField()


class HistoryOutput(serializers.Serializer):
    chunks = SequencedChunkOutput(many=True)
    hasMore = serializers.BooleanField()
    latestSequence = serializers.IntegerField()


class HistoryView(HelixAPIView):
    """`GET /api/sessions/{id}/history?fromSequence=&limit=`: stored chunks after a sequence."""

    class Input(serializers.Serializer):
        fromSequence = serializers.IntegerField(min_value=0, max_value=MAX_POSITION, default=0)
        limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)

    @extend_schema(parameters=[Input], responses=HistoryOutput)
    def get(self, request: Request, session_id: str) -> Response:
        query = self.Input(data=query_input(request.query_params))
        query.is_valid(raise_exception=True)
        session = session_for_user(session_id=session_id, user=request.user)
        try:
            page = get_stream_manager().get_chunks(
                session.stream_id,
                after_sequence=query.validated_data["fromSequence"],
                limit=query.validated_data["limit"],
            )
        except StreamNotFound:  # No writer yet: the stream is empty.
            return Response({"chunks": [], "hasMore": False, "latestSequence": 0})
        return Response(
            {
                "chunks": [{"sequence": c.sequence, "chunk": c.chunk} for c in page.chunks],
                "hasMore": page.has_more,
                "latestSequence": page.latest_sequence,
            }
        )
