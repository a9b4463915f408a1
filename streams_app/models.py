"""The live record: streams and their sequenced chunks.

Models stay thin; `streams_app.backends.orm` owns the invariants: sequences are assigned under
the stream's row lock, never reused, and readers are told after commit.
"""

from django.db import models
from django.db.models import Q
from django.utils import timezone


class Stream(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        ENDED = "ended"
        FAILED = "failed"

    id = models.CharField(primary_key=True, max_length=255)
    run_id = models.CharField(max_length=255, blank=True, default="")
    agent_type = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status, default=Status.ACTIVE)
    last_sequence = models.PositiveBigIntegerField(
        default=0, help_text="The highest sequence ever assigned; never goes back."
    )
    trimmed_through = models.PositiveBigIntegerField(
        default=0, help_text="Chunks up to this sequence were trimmed by the max_chunks cap."
    )
    chunk_count = models.PositiveIntegerField(default=0)
    writer_epoch = models.PositiveIntegerField(
        default=0, help_text="Bumped by each exclusive writer; older ones may no longer write."
    )
    final_output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    # When its status last changed or chunks were taken back (a finished stream's age, for the
    # purge). Appends leave it, so that they update no indexed column.
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(
                fields=["updated_at"],
                name="stream_finished_updated",
                condition=Q(status__in=["ended", "failed"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.status} stream {self.id}"


class StreamChunk(models.Model):
    stream = models.ForeignKey(
        Stream, on_delete=models.DB_CASCADE, related_name="chunks", db_index=False
    )
    sequence = models.PositiveBigIntegerField()
    step = models.PositiveIntegerField()
    type = models.CharField(max_length=32)
    chunk = models.JSONField(help_text="The chunk in its wire form.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # No index of steps: every chunk would write one more entry for the sake of the rare
        # reads by step (a dead attempt's cleanup, a retry's), which find a stream's chunks
        # through this constraint's index instead.
        constraints = [
            models.UniqueConstraint(fields=["stream", "sequence"], name="chunk_stream_sequence"),
        ]

    def __str__(self) -> str:
        return f"{self.type} chunk {self.sequence} of {self.stream_id}"
