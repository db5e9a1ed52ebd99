"""Commit a handler's DynamoDB writes atomically with its idempotency record.

Inside an idempotent body, `current_transaction()` returns the running invocation's
`Transaction`. Writes queued on it are not sent at once: when the body returns, the library sends
them in **one** ``TransactWriteItems`` together with the COMPLETED record, the record's put
conditioned on ``status = IN_PROGRESS AND owner = :token``. Either everything is written — the
business items and the record that makes every retry replay — or nothing is:

```python
from decimal import Decimal

from idempotent_lambda.transaction import current_transaction

@idempotent(persistence_store=store, config=config)
def handler(event, context):
    order = {"pk": f"order#{event['order_id']}", "total": Decimal(event["total"])}
    current_transaction().put("orders", order, condition="attribute_not_exists(pk)")
    return {"order_id": event["order_id"], "status": "created"}
```

It works the same in `idempotent`, `idempotent_function` and the event-source adapters (each
record of a batch gets its own transaction); an inner idempotent function has its own. When the
transaction is cancelled nothing is written and:

- our own condition failed (the lease was taken over): the decision is ``LEASE_LOST`` and the
  caller gets `IdempotencyAlreadyInProgressError` (a retry replays the other invocation's result);
- a business condition failed: the record is released and the caller gets
  `IdempotencyTransactionConflictError` with DynamoDB's reason for each write;
- any other failure after the body: the record is released and the error propagates.

Both errors of a transaction are importable from here, as from `idempotent_lambda` and
`idempotent_lambda.exceptions`: `IdempotencyTransactionError` and
`IdempotencyTransactionConflictError` (its `reasons` are `CancellationReason`s).

A body that raises (or whose result the adapter does not store, such as an HTTP 5xx) discards
its queued writes. With idempotency off (``IDEMPOTENCY_DISABLED``), no key in the payload, or an
HTTP method the adapter leaves alone, the decorators and adapters still commit the queued writes,
atomically among themselves, when the body returns (`IdempotentFunction.unrecorded`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from idempotent_lambda.exceptions import (
    CancellationReason,
    IdempotencyTransactionConflictError,
    IdempotencyTransactionError,
)
from idempotent_lambda.persistence.protocol import (
    MAX_TRANSACTION_WRITES,
    TransactionalStore,
    TransactItem,
)

if TYPE_CHECKING:
    from boto3.dynamodb.types import TypeSerializer

__all__ = [
    "MAX_TRANSACTION_WRITES",
    "CancellationReason",
    "IdempotencyTransactionConflictError",
    "IdempotencyTransactionError",
    "TransactItem",
    "Transaction",
    "current_transaction",
]

_OPERATIONS = ("Put", "Update", "Delete", "ConditionCheck")


class NamedTable(Protocol):
    """A boto3 ``Table`` resource, or anything else with the table's ``name``."""

    @property
    def name(self) -> str:
        """Return the table name."""
        ...


Table = str | NamedTable


class Transaction:
    """The business writes one invocation hands over, committed with its COMPLETED record.

    Obtain it with `current_transaction`. Methods take the document form (plain Python values,
    numbers as ``int`` or ``Decimal``, as a boto3 ``Table`` resource takes them), converted with
    boto3's ``TypeSerializer`` as they are queued; `add` takes the low-level client form.
    ``condition`` is an expression string or a ``boto3.dynamodb.conditions`` object
    (``Attr("pk").not_exists()``). ``return_old_on_failure=True`` asks DynamoDB for the item as it
    was when this write's condition fails (``CancellationReason.item``).

    Raises (from every method, inside the body where the write is queued):
        IdempotencyTransactionError: The body has returned; the write would be write number 100
            of the transaction (DynamoDB's limit, counting the record); the store cannot commit
            business writes; or a value has no DynamoDB form (``float``: use ``Decimal``).
    """

    __slots__ = ("_open", "_store", "_writes", "claim", "emitted", "key_prefix", "record_key")

    def __init__(
        self,
        store: object,
        record_key: str | None = None,
        *,
        claim: str | None = None,
        key_prefix: str | None = None,
    ) -> None:
        """Start an empty transaction for an invocation that uses ``store``.

        ``record_key`` is the invocation's idempotency key (None when it runs unrecorded),
        ``claim`` its owner token and ``key_prefix`` the function's: the outbox keys its events
        under them (without a claim, `emit` draws a random one on first use).
        """
        self._store = store
        self._writes: list[TransactItem] = []
        self._open = True
        self.record_key = record_key
        #: What makes this claim's outbox items its own (`idempotent_lambda.outbox.emit`).
        self.claim = claim
        #: The function's key prefix: the record key's, else the one given (or None).
        self.key_prefix = record_key.rsplit("#", 1)[0] if record_key else key_prefix
        #: Outbox events queued so far (`idempotent_lambda.outbox.emit`): the next one's position.
        self.emitted = 0

    @property
    def store(self) -> object:
        """Return the store the transaction commits with (the record format's view of it)."""
        return self._store

    @property
    def writes(self) -> tuple[TransactItem, ...]:
        """Return the queued writes, in the low-level form, in order."""
        return tuple(self._writes)

    def __len__(self) -> int:
        return len(self._writes)

    def put(
        self,
        table: Table,
        item: Mapping[str, Any],
        *,
        condition: Any = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
        return_old_on_failure: bool = False,
    ) -> None:
        """Queue a ``Put`` of ``item`` (document form) into ``table``."""
        body: dict[str, Any] = {"Item": _serialize_map(item, "item")}
        self._queue("Put", table, body, condition, names, values, return_old_on_failure)

    def update(
        self,
        table: Table,
        key: Mapping[str, Any],
        update: str,
        *,
        condition: Any = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
        return_old_on_failure: bool = False,
    ) -> None:
        """Queue an ``Update`` of the item at ``key`` with the ``update`` expression."""
        if not isinstance(update, str) or not update:
            raise IdempotencyTransactionError("update must be a non-empty update expression")
        body: dict[str, Any] = {"Key": _serialize_map(key, "key"), "UpdateExpression": update}
        self._queue("Update", table, body, condition, names, values, return_old_on_failure)

    def delete(
        self,
        table: Table,
        key: Mapping[str, Any],
        *,
        condition: Any = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
        return_old_on_failure: bool = False,
    ) -> None:
        """Queue a ``Delete`` of the item at ``key``."""
        body: dict[str, Any] = {"Key": _serialize_map(key, "key")}
        self._queue("Delete", table, body, condition, names, values, return_old_on_failure)

    def condition_check(
        self,
        table: Table,
        key: Mapping[str, Any],
        condition: Any,
        *,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
        return_old_on_failure: bool = False,
    ) -> None:
        """Queue a ``ConditionCheck``: the transaction commits only if ``condition`` holds."""
        if condition is None:
            raise IdempotencyTransactionError("condition_check needs a condition")
        body: dict[str, Any] = {"Key": _serialize_map(key, "key")}
        self._queue("ConditionCheck", table, body, condition, names, values, return_old_on_failure)

    def add(self, write: Mapping[str, Any]) -> None:
        """Queue one write in the low-level client form, as ``TransactItems`` holds it.

        For example ``{"Put": {"TableName": "orders", "Item": {"pk": {"S": "order#1"}}}}``.
        """
        if not isinstance(write, Mapping) or len(write) != 1:
            raise IdempotencyTransactionError(
                f"a low-level write is a mapping with one key, one of {', '.join(_OPERATIONS)}"
            )
        ((operation, body),) = write.items()
        if operation not in _OPERATIONS or not isinstance(body, Mapping):
            raise IdempotencyTransactionError(
                f"a low-level write is a mapping with one key, one of {', '.join(_OPERATIONS)}"
            )
        table = body.get("TableName")
        if not isinstance(table, str) or not table:
            raise IdempotencyTransactionError(f"the {operation} write has no TableName")
        self._append({operation: dict(body)})

    def _queue(  # noqa: PLR0917 - one private helper behind the four public methods
        self,
        operation: str,
        table: Table,
        body: dict[str, Any],
        condition: Any,
        names: Mapping[str, str] | None,
        values: Mapping[str, Any] | None,
        return_old_on_failure: bool,
    ) -> None:
        body["TableName"] = _table_name(table)
        all_names = dict(names or {})
        all_values = dict(values or {})
        if isinstance(condition, str):
            body["ConditionExpression"] = condition
        elif condition is not None:
            expression, built_names, built_values = _build_condition(condition)
            if set(built_names) & set(all_names) or set(built_values) & set(all_values):
                raise IdempotencyTransactionError(
                    "names/values reuse a placeholder of the condition object (#n0, :v0, ...)"
                )
            body["ConditionExpression"] = expression
            all_names.update(built_names)
            all_values.update(built_values)
        if all_names:
            body["ExpressionAttributeNames"] = all_names
        if all_values:
            body["ExpressionAttributeValues"] = _serialize_map(all_values, "values")
        if return_old_on_failure:
            body["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        self._append({operation: body})

    def _append(self, write: TransactItem) -> None:
        if not self._open:
            raise IdempotencyTransactionError(
                "this invocation's body has returned: its transaction is closed"
            )
        if not isinstance(self._store, TransactionalStore):
            raise IdempotencyTransactionError(
                f"{type(self._store).__name__} cannot commit business writes with the record; "
                "use DynamoDBPersistenceLayer (or InMemoryPersistenceLayer in tests)"
            )
        if len(self._writes) >= MAX_TRANSACTION_WRITES:
            raise IdempotencyTransactionError(
                f"at most {MAX_TRANSACTION_WRITES} business writes per invocation: DynamoDB "
                "transactions hold 100 items and one is the idempotency record"
            )
        self._writes.append(write)


_current: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar(
    "idempotent_lambda_transaction", default=None
)


def running_transaction() -> Transaction | None:
    """Return the transaction of the idempotent body running here, or None."""
    return _current.get()


def current_transaction() -> Transaction:
    """Return the transaction of the idempotent invocation running in this thread or task.

    Raises:
        IdempotencyTransactionError: No idempotent body is running here (called outside the
            decorated function, or from a thread that did not copy the context).
    """
    transaction = _current.get()
    if transaction is None:
        raise IdempotencyTransactionError(
            "current_transaction() works only inside a function decorated by idempotent_lambda "
            "(idempotent, idempotent_function or an adapter), while its body runs"
        )
    return transaction


Binding = tuple[Transaction, "contextvars.Token[Transaction | None]"]


def open_transaction(
    store: object,
    record_key: str | None = None,
    *,
    claim: str | None = None,
    key_prefix: str | None = None,
) -> Binding:
    """Start a transaction for a body about to run and make it the current one."""
    transaction = Transaction(store, record_key, claim=claim, key_prefix=key_prefix)
    return transaction, _current.set(transaction)


def close_transaction(binding: Binding) -> tuple[TransactItem, ...]:
    """Restore the previous current transaction; return the closed one's writes."""
    transaction, token = binding
    _current.reset(token)
    transaction._open = False
    return tuple(transaction._writes)


def _table_name(table: Table) -> str:
    name = table if isinstance(table, str) else getattr(table, "name", None)
    if not isinstance(name, str) or not name:
        raise IdempotencyTransactionError("table must be a table name or a boto3 Table resource")
    return name


_serializer: TypeSerializer | None = None


def _serialize_map(document: Mapping[str, Any], what: str) -> dict[str, Any]:
    """Convert a document-form mapping to DynamoDB attribute values."""
    global _serializer  # noqa: PLW0603 - one serializer, built on first use
    if not isinstance(document, Mapping):
        raise IdempotencyTransactionError(f"{what} must be a mapping")
    if _serializer is None:
        from boto3.dynamodb.types import TypeSerializer

        _serializer = TypeSerializer()
    try:
        return {str(name): _serializer.serialize(value) for name, value in document.items()}
    except (TypeError, ValueError) as exc:
        hint = " (use Decimal, not float)" if "Float" in str(exc) else ""
        raise IdempotencyTransactionError(
            f"{what} holds a value DynamoDB cannot store{hint}"
        ) from exc


def _build_condition(condition: Any) -> tuple[str, dict[str, str], dict[str, Any]]:
    """Turn a ``boto3.dynamodb.conditions`` object into expression, names and values."""
    from boto3.dynamodb.conditions import ConditionBase, ConditionExpressionBuilder

    if not isinstance(condition, ConditionBase):
        raise IdempotencyTransactionError(
            "condition must be an expression string or a boto3.dynamodb.conditions object"
        )
    built = ConditionExpressionBuilder().build_expression(condition)
    return (
        built.condition_expression,
        dict(built.attribute_name_placeholders),
        dict(built.attribute_value_placeholders),
    )
