"""What the admin pages take from their addresses: only what a database can look up.

An object's id in the address and a filter's value in the query reach the database as they
are. PostgreSQL refuses a NUL character in a text, which made those pages server errors there,
while SQLite looked it up (`sessions_app.storable`). No stored row holds one, so the admin now
answers as it does for an id it cannot find and for a filter it cannot apply, alike on both.
"""

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest

from sessions_app.storable import unstorable_character, unstorable_text


class StorableInputsAdmin(admin.ModelAdmin):
    """A `ModelAdmin` that takes an id or a query no database stores as missing or invalid."""

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        """Return `None`, as for an id not found, when the id holds what no database stores."""
        if unstorable_character(object_id):
            return None
        return super().get_object(request, object_id, from_field)

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        """Refuse a query holding what no database stores, as Django refuses a filter it cannot
        apply: the list sends the browser back to itself, unfiltered, with `?e=1`."""
        if kind := unstorable_character(dict(request.GET.lists())):
            raise IncorrectLookupParameters(f"The query holds {unstorable_text(kind)}.")
        return super().get_changelist_instance(request)
