"""`/`: the landing page (`agents_app.chat.landing`); include it at the root of a URLconf."""

from django.urls import path

from agents_app.chat.landing import landing_page

urlpatterns = [
    path("", landing_page, name="helix-landing"),
]
