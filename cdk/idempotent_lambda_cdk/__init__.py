"""CDK constructs for idempotent_lambda: the idempotency table, its bucket, least-privilege grants.

```python
from idempotent_lambda_cdk import IdempotencyTable

idempotency = IdempotencyTable(self, "Idempotency", large_results=True)
idempotency.grant_idempotency(create_order, key_prefix="orders.create_order")
idempotency.grant_idempotency(process_payment, key_prefix="orders.process_payment", batch=True)
```

With the transactional outbox (`idempotent_lambda.outbox`):

```python
idempotency = IdempotencyTable(self, "Idempotency", outbox=True)
idempotency.grant_idempotency(create_order, key_prefix="orders.create_order")  # covers its events
idempotency.add_outbox_publisher(
    publisher,
    key_prefixes=["orders.create_order"],
    event_bus=bus,
    sources=["orders"],
    on_failure=failures,
    sweeper=sweeper,
)
```

A CloudWatch dashboard of the library's metrics for those functions:

```python
idempotency.add_dashboard(namespace="Orders", dimensions={"service": "orders"})
```
"""

from idempotent_lambda_cdk._outbox import (
    OUTBOX_INDEX,
    OUTBOX_KEY_MARK,
    PUBLISH_ACTIONS,
    STREAM_ACTIONS,
    SWEEP_ACTIONS,
)
from idempotent_lambda_cdk._table import (
    BATCH_ACTIONS,
    LARGE_RESULT_ACTIONS,
    LARGE_RESULTS_ROOT,
    RECORD_ACTIONS,
    IdempotencyTable,
    large_result_prefix,
)

__all__ = [
    "BATCH_ACTIONS",
    "LARGE_RESULTS_ROOT",
    "LARGE_RESULT_ACTIONS",
    "OUTBOX_INDEX",
    "OUTBOX_KEY_MARK",
    "PUBLISH_ACTIONS",
    "RECORD_ACTIONS",
    "STREAM_ACTIONS",
    "SWEEP_ACTIONS",
    "IdempotencyTable",
    "large_result_prefix",
]
__version__ = "0.1.0"
