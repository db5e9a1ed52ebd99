from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, event_keys, idempotent

store = DynamoDBPersistenceLayer("IdempotencyTable")


def build_report(name: str, day: str) -> str:
    """Stand-in for the work that must happen once per scheduled run."""
    return f"reports/{name}/{day}.csv"


@idempotent(
    persistence_store=store,
    config=IdempotencyConfig(
        event_key_jmespath=event_keys.SCHEDULER,  # schedule_arn + scheduled_time
        raise_on_no_idempotency_key=True,  # an input without them fails, never runs twice
    ),
)
def handler(event: dict, context) -> dict:
    day = event["scheduled_time"][:10]  # the run's own date, not today's: a late retry agrees
    return {"report": build_report(event["report"], day)}
