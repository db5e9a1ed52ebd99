from idempotent_lambda import DynamoDBPersistenceLayer
from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler

store = DynamoDBPersistenceLayer(table_name="IdempotencyTable")


class Ledger:
    """Stand-in for handler code that is not thread-safe: a client, a cache, a counter."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    def charge(self, body: str) -> str:
        self.entries.append(body)
        return f"ch_{len(self.entries)}"


ledger = Ledger()


# Records run concurrently by default (64 at a time); 1 runs them one after the other, as
# Powertools' BatchProcessor does.
@idempotent_sqs_handler(persistence_store=store, max_concurrency=1)
def handler(record: SQSRecord, context) -> dict:
    return {"charge_id": ledger.charge(record.body)}
