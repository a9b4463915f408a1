"""Signing in and out of Helix's own pages (the landing and chat pages), for any user, staff or
not: Django's auth views with Helix's templates. Include `agents_app.accounts.urls`."""
