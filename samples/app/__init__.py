"""The sample order service: Lambda functions made idempotent with idempotent_lambda.

- `create_order` — ``POST /orders`` behind an HTTP API, keyed by the ``Idempotency-Key`` header;
  emits ``OrderCreated`` through the outbox.
- `process_payment` — payments from an SQS queue, keyed by the payment id in the message.
- `project_orders` — per-customer totals from the orders table's stream, once per record.
- `publish_events` — the outbox's publisher: the idempotency table's stream to EventBridge.
- `reserve_stock` — ``OrderCreated`` from the bus's queue, keyed by the event's outbox id.

Deployed by ``template.yaml`` (where this package is ``app``); run locally by ``samples.demo``.
Modules import each other relatively so the package works under either name.
"""
