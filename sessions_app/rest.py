"""The base of every Helix REST view: its policy is its own, whatever ``REST_FRAMEWORK`` says.

A project that adds Helix keeps its DRF defaults for its own views, and Helix's views keep
theirs: a session login (CSRF enforced on unsafe methods) or `Authorization: Token <key>`, a
signed-in user, the strict JSON parser (`sessions_app.parsers`), the one error shape
(`sessions_app.http`) and the schema that documents it (`sessions_app.openapi`).
"""

from collections.abc import Callable

from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.views import APIView

from sessions_app.http import exception_handler
from sessions_app.openapi import HelixAutoSchema
from sessions_app.parsers import JSONParser


class HelixAPIView(APIView):
    """An `APIView` with Helix's authentication, permissions, parser, errors and schema."""

    authentication_classes = [SessionAuthentication, TokenAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [JSONParser]
    versioning_class = None
    schema = HelixAutoSchema()

    def get_exception_handler(self) -> Callable:
        """Return the handler that renders every error in the Helix error shape."""
        return exception_handler
