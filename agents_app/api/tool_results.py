"""`POST /api/chat/{id}/submit-tool-result`: a person's answer to a suspended tool call."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents_app.api.fields import StrictCharField
from agents_app.runs.tool_results import tool_result_submit
from sessions_app.rest import HelixAPIView


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean; DRF's own also takes "yes", "on", 1 and the like."""

    def to_internal_value(self, data: object) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class SubmitToolResultView(HelixAPIView):
    """`POST`: record a client tool's `result`, or an approval tool call's `approved` decision.

    Durable and idempotent: a repeated submission answers as the first did. The submission
    that answers the last pending call continues the run; re-attach with `GET .../stream`.
    """

    class SubmitInput(serializers.Serializer):
        toolCallId = StrictCharField(max_length=255)
        result = serializers.JSONField(required=False, allow_null=True)
        approved = StrictBooleanField(required=False, allow_null=True, default=None)
        reason = StrictCharField(required=False, allow_null=True, max_length=10_000)

    class SubmitOutput(serializers.Serializer):
        toolCallId = serializers.CharField()
        submittedAt = serializers.IntegerField(help_text="Milliseconds since the epoch.")

    @extend_schema(request=SubmitInput, responses={202: SubmitOutput})
    def post(self, request: Request, session_id: str) -> Response:
        body = self.SubmitInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        submitted = tool_result_submit(
            user=request.user,
            session_id=session_id,
            tool_call_id=data["toolCallId"],
            result=data.get("result"),
            approved=data["approved"],
            reason=data.get("reason"),
        )
        output = {"toolCallId": submitted.tool_call_id, "submittedAt": submitted.submitted_at}
        return Response(self.SubmitOutput(output).data, status=status.HTTP_202_ACCEPTED)
