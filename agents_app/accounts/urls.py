"""`/accounts/login/` and `/accounts/logout/`: Django's `LoginView` and `LogoutView` with Helix's
templates, for users the admin's login refuses (anyone not staff).

Point ``LOGIN_URL`` at ``"helix-login"`` to send the chat page's visitors here; a login without
`next` goes to ``LOGIN_REDIRECT_URL``, and a logout (POST only) to the landing page.
"""

from django.contrib.auth import views
from django.urls import path

urlpatterns = [
    path("login/", views.LoginView.as_view(template_name="helix/login.html"), name="helix-login"),
    path("logout/", views.LogoutView.as_view(next_page="helix-landing"), name="helix-logout"),
]
