"""CDK constructs for idempotent_lambda: the idempotency table, its bucket, least-privilege grants.

```python
from idempotent_lambda_cdk import IdempotencyTable

idempotency = IdempotencyTable(self, "Idempotency", large_results=True)
idempotency.grant_idempotency(create_order, key_prefix="orders.create_order")
idempotency.grant_idempotency(process_payment, key_prefix="orders.process_payment", batch=True)
```
"""

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
    "RECORD_ACTIONS",
    "IdempotencyTable",
    "large_result_prefix",
]
__version__ = "0.1.0"
