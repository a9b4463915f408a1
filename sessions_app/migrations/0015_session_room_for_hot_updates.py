"""PostgreSQL-only: room on the sessions' pages for heap-only (HOT) updates.

Every step claims its session's lease, and renews it while the model answers: updates that
change no indexed column, which stay on their page when it has room (`sessions_app.db_tuning`).
"""

from django.db import migrations

from sessions_app.db_tuning import room_for_hot_updates


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0014_checkpoint_timings")]

    operations = [room_for_hot_updates("sessions_app", "AgentSession", fillfactor=70)]
