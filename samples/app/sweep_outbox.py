"""SweepOutbox: republishes the outbox's events that the stream did not bring to PublishEvents.

Run on a schedule (template.yaml: every 5 minutes). `outbox.sweep_handler` reads the oldest
unpublished items of ``OUTBOX_KEY_PREFIXES`` from the table's sparse index
``outbox-unpublished`` (items leave it when they are marked published), publishes those that
waited longer than PublishEvents should ever take, and reports the age of the oldest it found,
which the template's alarm watches. It covers what the stream cannot: records given up on after
the mapping's retries, and items whose records the stream no longer holds (24 h retention, a
disabled stream or mapping). The consumer deduplicates on the event id, so an event that both
publish reaches it once.
"""

from __future__ import annotations

from idempotent_lambda import outbox

from .aws import events_client, outbox_store
from .observability import logger
from .orders import OUTBOX_KEY_PREFIXES

handler = logger.inject_lambda_context(
    outbox.sweep_handler(
        outbox_store(), events_client=events_client(), key_prefixes=OUTBOX_KEY_PREFIXES
    )
)
