"""Reap expired sessions and purge streams past their retention (reference 003
`expiredSessionCleanup`); run it from cron or let the Celery beat schedule run it."""

import argparse
import re
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.utils.dateparse import parse_duration

from agents_app.operations.reaping import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_EXPIRY_ERROR,
    ReapReport,
    reap_expired_sessions,
)
from streams_app.services import purge_expired_streams

UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
# How many session ids a dry run prints; the count covers them all.
SHOWN_IDS = 20


class Command(BaseCommand):
    help = (
        "Fail (or delete) live sessions whose expiry has passed, in batches, then purge ended "
        "and failed streams older than STREAM_RETENTION_DAYS. Safe to run twice at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add the sweep's options."""
        parser.add_argument(
            "--dry-run", action="store_true", help="list what would be reaped; change nothing"
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=DEFAULT_BATCH_SIZE,
            help=f"sessions per transaction (default {DEFAULT_BATCH_SIZE})",
        )
        parser.add_argument(
            "--error",
            default=DEFAULT_EXPIRY_ERROR,
            metavar="REASON",
            help=f'the error recorded on failed sessions (default "{DEFAULT_EXPIRY_ERROR}")',
        )
        parser.add_argument(
            "--delete",
            action="store_true",
            help="delete expired sessions of any status, with their streams, instead of failing",
        )
        parser.add_argument(
            "--older-than",
            type=duration,
            metavar="DURATION",
            help="only sessions that expired at least this long ago: 30m, 12h, 7d, 2w or P7D",
        )
        parser.add_argument(
            "--limit", type=positive_int, help="reap at most this many sessions in this run"
        )

    def handle(
        self,
        *args: object,
        dry_run: bool,
        batch_size: int,
        error: str,
        delete: bool,
        older_than: timedelta | None,
        limit: int | None,
        **options: object,
    ) -> None:
        """Reap, report each batch, purge old streams, and summarise."""
        if not error.strip():
            raise CommandError("--error must not be empty.")
        try:
            report = reap_expired_sessions(
                error=error,
                delete=delete,
                older_than=older_than,
                limit=limit,
                batch_size=batch_size,
                dry_run=dry_run,
                progress=self.progress,
            )
            purged = 0 if dry_run else purge_expired_streams(batch_size=batch_size)
        except DatabaseError as failure:
            raise CommandError(f"The sweep stopped: {failure}") from failure
        self.summarise(report, purged)

    def progress(self, report: ReapReport) -> None:
        """Say how far the sweep has got after each batch."""
        verb = "deleted" if report.delete else "failed"
        self.stdout.write(f"batch {report.batches}: {len(report.reaped)} sessions {verb} so far")

    def summarise(self, report: ReapReport, purged: int) -> None:
        """Write what the sweep did, or in a dry run what it would have done."""
        count = len(report.reaped)
        verb, done = ("delete", "Deleted") if report.delete else ("fail", "Failed")
        cutoff = f"expired by {report.cutoff.isoformat(timespec='seconds')}"
        if report.dry_run:
            shown = ", ".join(report.reaped[:SHOWN_IDS])
            more = f" and {count - SHOWN_IDS} more" if count > SHOWN_IDS else ""
            self.stdout.write(f"Dry run: would {verb} {count} sessions {cutoff}.")
            if count:
                self.stdout.write(f"  {shown}{more}")
            return
        self.stdout.write(
            self.style.SUCCESS(
                f"{done} {count} sessions {cutoff} in {report.batches} batches; "
                f"purged {purged} streams past their retention."
            )
        )


def positive_int(value: str) -> int:
    """Parse a whole number of at least 1."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of at least 1")
    return number


def duration(value: str) -> timedelta:
    """Parse `30m`, `12h`, `7d`, `2w`, seconds, or what Django's `parse_duration` reads."""
    match = re.fullmatch(r"(\d+)([smhdw]?)", value.strip())
    parsed = (
        timedelta(**{UNITS[match[2] or "s"]: int(match[1])}) if match else parse_duration(value)
    )
    if parsed is None or parsed < timedelta(0):
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration such as 30m, 12h, 7d or P7D")
    return parsed
