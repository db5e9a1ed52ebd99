"""ProcessPayment: marks orders paid from ``PaymentsQueue``, once per payment.

The idempotency key is the business key in the message, ``payment_id``, not the SQS message id:
a producer that sends the same payment twice (two message ids) still pays the order once, and
the second message gets the first one's result. The amount and order are validated too: the
same payment id with another amount or order is refused (`IdempotencyValidationError`).

Failures are per message (``batchItemFailures``): one bad payment is retried, and after the
queue's ``maxReceiveCount`` it lands in the dead-letter queue; the others are not retried.
Behind the idempotency record, the order update itself is conditional on the order's version
(optimistic locking), so a payment that somehow runs twice still pays once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, cast

from idempotent_lambda.adapters.sqs import SQSRecord, idempotent_sqs_handler

from .aws import idempotency_store, orders_table, record_expiry_seconds
from .observability import idempotency_config, logger, metrics
from .orders import PAID, PENDING, money

#: This function's records and large results: template.yaml grants its IAM on this prefix.
KEY_PREFIX = "orders.process_payment"


class PaymentError(Exception):
    """The payment cannot be applied; the message is reported failed and retried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        logger.warning("payment not applied: %s", reason)  # the batch log names only the class


@dataclass(frozen=True, slots=True)
class Payment:
    """A payment message: ``{"payment_id": ..., "order_id": ..., "amount": "12.50"}``."""

    payment_id: str
    order_id: str
    amount: Decimal

    @classmethod
    def from_json(cls, body: Any) -> Payment:
        """Validate a parsed message body.

        Raises:
            PaymentError: A field is missing or has the wrong type.
        """
        if not isinstance(body, dict):
            raise PaymentError("payment message is not a JSON object")
        payment_id, order_id = body.get("payment_id"), body.get("order_id")
        if not isinstance(payment_id, str) or not isinstance(order_id, str):
            raise PaymentError("payment message needs string payment_id and order_id")
        try:
            amount = Decimal(str(body.get("amount")))
        except InvalidOperation:
            raise PaymentError("payment amount is not a number") from None
        return cls(payment_id, order_id, amount)


@logger.inject_lambda_context
@metrics.log_metrics
@idempotent_sqs_handler(
    persistence_store=idempotency_store(KEY_PREFIX),
    config=idempotency_config(
        event_key_jmespath="powertools_json(body).payment_id",
        payload_validation_jmespath="powertools_json(body).[order_id, amount]",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=record_expiry_seconds(),
    ),
    key_prefix=KEY_PREFIX,
)
def handler(record: SQSRecord, context: Any) -> dict[str, Any]:
    """Mark the payment's order PAID (conditional on its version); return what was done."""
    payment = Payment.from_json(record.json_body)
    table = orders_table()
    found = table.get_item(Key={"order_id": payment.order_id}, ConsistentRead=True).get("Item")
    if found is None:
        raise PaymentError(f"order {payment.order_id} does not exist")
    order = cast(dict[str, Any], found)
    if order["status"] == PAID:
        if order.get("payment_id") == payment.payment_id:
            return {"order_id": payment.order_id, "status": PAID, "version": int(order["version"])}
        raise PaymentError(f"order {payment.order_id} is already paid by another payment")
    if Decimal(str(order["total"])) != payment.amount:
        raise PaymentError(
            f"payment of {money(payment.amount)} does not match the order total "
            f"{money(Decimal(str(order['total'])))}"
        )
    version = int(order["version"])
    try:
        table.update_item(
            Key={"order_id": payment.order_id},
            UpdateExpression=(
                "SET #status = :paid, payment_id = :payment_id, paid_at = :now, version = :next"
            ),
            ConditionExpression="version = :version AND #status = :pending",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                ":paid": PAID,
                ":pending": PENDING,
                ":payment_id": payment.payment_id,
                ":now": int(time.time()),
                ":version": version,
                ":next": version + 1,
            },
        )
    except table.meta.client.exceptions.ConditionalCheckFailedException:
        # Someone changed the order since we read it: fail this message; the retry re-reads.
        raise PaymentError(f"order {payment.order_id} changed concurrently") from None
    return {"order_id": payment.order_id, "status": PAID, "version": version + 1}
