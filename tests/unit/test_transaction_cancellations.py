"""DynamoDB transactional completion against stubbed responses: retries and cancellation reasons.

The moto server cannot provoke ``TransactionConflict`` or throttling cancellations, nor a
cancellation without reasons; botocore's ``Stubber`` answers with exactly those.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from idempotent_lambda import (
    DynamoDBPersistenceLayer,
    IdempotencyPersistenceLayerError,
    IdempotencyRecord,
    Status,
)
from idempotent_lambda.exceptions import (
    IdempotencyTransactionConflictError,
    IdempotencyTransactionError,
)
from idempotent_lambda.persistence.dynamodb import _transaction

BUSINESS = {"Put": {"TableName": "orders", "Item": {"pk": {"S": "o1"}}}}
RECORD = IdempotencyRecord(
    idempotency_key="orders#abc",
    status=Status.COMPLETED,
    expiry_timestamp=1_800_000_000,
    response_data='{"ok":true}',
    owner="me",
)


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DynamoDBPersistenceLayer, Stubber]]:
    """Yield a store on a stubbed client, with no pause between transaction attempts."""
    monkeypatch.setattr(_transaction, "BACKOFF_S", (0.0, 0.0))
    client = boto3.session.Session().client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    with Stubber(client) as stubber:
        yield DynamoDBPersistenceLayer("idempotency", boto3_client=client), stubber
        stubber.assert_no_pending_responses()


def cancel(stubber: Stubber, *codes: str | None) -> None:
    """Queue a cancellation with these reason codes (None: no reasons at all)."""
    fields: dict[str, Any] = {}
    if codes != (None,):
        fields["CancellationReasons"] = [{"Code": code} for code in codes]
    stubber.add_client_error(
        "transact_write_items",
        service_error_code="TransactionCanceledException",
        service_message="Transaction cancelled",
        http_status_code=400,
        modeled_fields=fields,
    )


def test_transient_cancellations_are_retried(
    stubbed: tuple[DynamoDBPersistenceLayer, Stubber],
) -> None:
    """TransactionConflict, then throttling, then success: committed on the third attempt."""
    store, stubber = stubbed
    cancel(stubber, "TransactionConflict", "None")
    cancel(stubber, "None", "ThrottlingError")
    stubber.add_response("transact_write_items", {})

    assert store.complete_with(RECORD, [BUSINESS]) is True


def test_transient_cancellations_give_up_after_three_attempts(
    stubbed: tuple[DynamoDBPersistenceLayer, Stubber],
) -> None:
    """Still conflicting after three attempts: a store error naming the reason."""
    store, stubber = stubbed
    for _ in range(3):
        cancel(stubber, "TransactionConflict", "None")

    with pytest.raises(IdempotencyPersistenceLayerError, match="cancelled: TransactionConflict"):
        store.complete_with(RECORD, [BUSINESS])


def test_our_failed_condition_means_lease_lost_even_if_a_write_failed_too(
    stubbed: tuple[DynamoDBPersistenceLayer, Stubber],
) -> None:
    """Our record's condition failed: False (lease lost), whatever the business writes said."""
    store, stubber = stubbed
    cancel(stubber, "ConditionalCheckFailed", "ConditionalCheckFailed")

    assert store.complete_with(RECORD, [BUSINESS]) is False


def test_a_cancellation_without_reasons_is_a_store_error(
    stubbed: tuple[DynamoDBPersistenceLayer, Stubber],
) -> None:
    """No reasons to tell what failed: a store error (the engine then releases, conditionally)."""
    store, stubber = stubbed
    cancel(stubber, None)

    with pytest.raises(IdempotencyPersistenceLayerError, match="Unknown"):
        store.complete_with(RECORD, [BUSINESS])


def test_an_invalid_business_write_is_a_transaction_error_not_a_conflict(
    stubbed: tuple[DynamoDBPersistenceLayer, Stubber],
) -> None:
    """A ValidationError reason on a business write: `IdempotencyTransactionError`."""
    store, stubber = stubbed
    cancel(stubber, "ValidationError", "None")

    with pytest.raises(IdempotencyTransactionError, match=r"write 0 \(Put on orders\)") as caught:
        store.complete_with(RECORD, [BUSINESS])
    assert not isinstance(caught.value, IdempotencyTransactionConflictError)


def test_other_client_errors_are_store_errors(
    stubbed: tuple[DynamoDBPersistenceLayer, Stubber],
) -> None:
    """Access denied and the like go through the one translation boundary."""
    store, stubber = stubbed
    stubber.add_client_error("transact_write_items", service_error_code="AccessDeniedException")

    with pytest.raises(IdempotencyPersistenceLayerError, match="TransactWriteItems failed"):
        store.complete_with(RECORD, [BUSINESS])


def test_a_plain_transaction_reports_conflicts_per_write(
    stubbed: tuple[DynamoDBPersistenceLayer, Stubber],
) -> None:
    """Without a record every reason is a business write's."""
    store, stubber = stubbed
    cancel(stubber, "None", "ConditionalCheckFailed")
    second = {"Delete": {"TableName": "carts", "Key": {"id": {"S": "c"}}}}

    with pytest.raises(IdempotencyTransactionConflictError) as caught:
        store.write_transaction([BUSINESS, second])

    assert [("Put", "orders", "None"), ("Delete", "carts", "ConditionalCheckFailed")] == [
        (r.operation, r.table, r.code) for r in caught.value.reasons
    ]
    assert [1] == [r.index for r in caught.value.failed]


def test_more_than_99_writes_never_reach_the_client(
    stubbed: tuple[DynamoDBPersistenceLayer, Stubber],
) -> None:
    """The limit is checked before sending (no stubbed response is consumed)."""
    store, _ = stubbed

    with pytest.raises(IdempotencyTransactionError, match="at most 99"):
        store.complete_with(RECORD, [BUSINESS] * 100)
