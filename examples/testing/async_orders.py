import asyncio
import os

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent

store = DynamoDBPersistenceLayer(os.environ["IDEMPOTENCY_TABLE"])


async def reserve_stock(order_id: str) -> str:
    """Stand-in for the awaited side effect (an HTTP call, say) that must happen once."""
    await asyncio.sleep(0)
    return f"res_{order_id}"


@idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
async def process(event: dict, context) -> dict:
    reservation = await reserve_stock(event["order_id"])
    return {"order_id": event["order_id"], "reservation": reservation}


def handler(event: dict, context) -> dict:
    # Lambda's Python runtime calls a plain function: it runs the async one to completion.
    return asyncio.run(process(event, context))
