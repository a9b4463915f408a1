"""Index expiring sessions by (expires_at, id), and the live ones apart, for the expiry sweep."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0009_message_search_prefix"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="agentsession",
            name="session_expiry",
        ),
        migrations.AddIndex(
            model_name="agentsession",
            index=models.Index(
                condition=models.Q(("expires_at__isnull", False)),
                fields=["expires_at", "id"],
                name="session_expiry",
            ),
        ),
        migrations.AddIndex(
            model_name="agentsession",
            index=models.Index(
                condition=models.Q(
                    ("expires_at__isnull", False),
                    models.Q(("status__in", ["completed", "failed"]), _negated=True),
                ),
                fields=["expires_at", "id"],
                name="session_live_expiry",
            ),
        ),
    ]
