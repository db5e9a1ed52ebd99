"""Run the outbox publisher on a batch (stdin) and die right after PutEvents returns.

argv: moto's endpoint, the table. The events client is moto's real one; the process exits with
status 17 from inside it once EventBridge has accepted the events, before any is marked.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from idempotent_lambda.outbox import publish_handler
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from tests.integration._outbox_stack import client


class DiesAfterPutEvents:
    """moto's events client, except that the process ends once put_events has returned."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def put_events(self, **request: Any) -> Any:
        response = self.real.put_events(**request)
        sys.stdout.flush()
        os._exit(17)
        return response  # pragma: no cover


def main() -> None:
    endpoint, table = sys.argv[1:3]
    store = DynamoDBPersistenceLayer(table, boto3_client=client("dynamodb", endpoint))
    publish = publish_handler(store, events_client=DiesAfterPutEvents(client("events", endpoint)))
    publish(json.loads(sys.stdin.read()), None)
    sys.exit(0)


if __name__ == "__main__":
    main()
