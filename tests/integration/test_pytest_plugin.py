"""The plugin's DynamoDB fixtures: a store on moto's server, a fresh table per test, boto3
pointed at the server through the environment."""

from __future__ import annotations

import json
import os
from typing import Any

import boto3
import pytest

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.testing import FakeLambdaContext, ManualClock

pytest_plugins = ["pytester"]


def test_the_store_fixture_runs_a_handler_once(
    idempotency_dynamodb_store: DynamoDBPersistenceLayer,
    idempotency_dynamodb_endpoint: str,
    lambda_context: FakeLambdaContext,
) -> None:
    """A handler on the fixture's store runs once per key and leaves one item in the table."""
    runs: list[Any] = []

    @idempotent(
        persistence_store=idempotency_dynamodb_store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"order_id": event["order_id"]}

    assert handler({"order_id": "o-1"}, lambda_context) == handler(
        {"order_id": "o-1"}, lambda_context
    )
    assert 1 == len(runs)
    client = boto3.client("dynamodb", endpoint_url=idempotency_dynamodb_endpoint)
    assert 1 == client.scan(TableName=idempotency_dynamodb_store.table_name)["Count"]


def test_the_store_is_on_the_test_clock(
    idempotency_dynamodb_store: DynamoDBPersistenceLayer,
    idempotency_clock: ManualClock,
    lambda_context: FakeLambdaContext,
) -> None:
    """Moving `idempotency_clock` expires the DynamoDB store's records too."""
    runs: list[Any] = []

    @idempotent(persistence_store=idempotency_dynamodb_store)
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(event)
        return len(runs)

    handler({"n": 1}, lambda_context)
    idempotency_clock.advance(seconds=3601)
    handler({"n": 1}, lambda_context)
    assert 2 == len(runs)


def test_the_table_fixture_points_boto3_at_the_server(
    idempotency_dynamodb_table: str, idempotency_dynamodb_endpoint: str
) -> None:
    """A client built with no options, as a module-level store builds it, finds the table."""
    assert idempotency_dynamodb_endpoint == os.environ["AWS_ENDPOINT_URL_DYNAMODB"]
    assert idempotency_dynamodb_endpoint.startswith("http://127.0.0.1:")
    assert idempotency_dynamodb_table in boto3.client("dynamodb").list_tables()["TableNames"]


@pytest.fixture
def shell_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's shell that sends SQS and Lambda elsewhere (requested before the table)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", "http://127.0.0.1:9")


def test_the_table_fixture_points_every_local_service_at_the_server(
    shell_endpoints: None,
    idempotency_dynamodb_store: DynamoDBPersistenceLayer,
    idempotency_dynamodb_endpoint: str,
    lambda_context: FakeLambdaContext,
) -> None:
    """Plain clients read the table's stream, and reach S3, EventBridge and SQS on the server.

    EventBridge delivers to SQS there too: the route an outbox's events take.
    """
    table = idempotency_dynamodb_store.table_name
    dynamodb = boto3.client("dynamodb")
    dynamodb.update_table(
        TableName=table,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    clients = {name: boto3.client(name) for name in ("dynamodbstreams", "s3", "events", "sqs")}
    clients["lambda"] = boto3.client("lambda")
    assert {idempotency_dynamodb_endpoint} == {c.meta.endpoint_url for c in clients.values()}

    @idempotent(persistence_store=idempotency_dynamodb_store)
    def handler(event: dict[str, Any], context: Any) -> str:
        return "charged"

    handler({"order_id": "o-1"}, lambda_context)
    streams = clients["dynamodbstreams"]
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    images = [
        r["dynamodb"]["NewImage"] for r in streams.get_records(ShardIterator=iterator)["Records"]
    ]
    assert "COMPLETED" == images[-1]["status"]["S"]

    s3 = clients["s3"]
    s3.create_bucket(Bucket="kit-results")
    s3.put_object(Bucket="kit-results", Key="k", Body=b"v")
    assert b"v" == s3.get_object(Bucket="kit-results", Key="k")["Body"].read()

    sqs, events = clients["sqs"], clients["events"]
    queue = sqs.create_queue(QueueName="kit-outbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(Name="kit-orders", EventPattern=json.dumps({"source": ["orders"]}))
    events.put_targets(Rule="kit-orders", Targets=[{"Id": "queue", "Arn": queue_arn}])
    events.put_events(Entries=[{"Source": "orders", "DetailType": "charged", "Detail": "{}"}])
    received = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=5)["Messages"]
    assert "charged" == json.loads(received[0]["Body"])["detail-type"]


def test_tables_are_fresh_per_test_and_deleted_after(pytester: pytest.Pytester) -> None:
    """Each test gets its own table, gone after the test; a pinned name is always empty."""
    pytester.makepyfile(
        """
        import boto3
        import pytest

        names = []

        def tables():
            return boto3.client("dynamodb").list_tables()["TableNames"]

        def test_first(idempotency_dynamodb_table):
            names.append(idempotency_dynamodb_table)

        def test_second(idempotency_dynamodb_table):
            assert names[0] != idempotency_dynamodb_table
            assert names[0] not in tables()
            assert idempotency_dynamodb_table in tables()

        def test_a_table_left_by_someone_else(idempotency_dynamodb_table):
            client = boto3.client("dynamodb")
            client.create_table(
                TableName="PinnedIdempotencyTable",
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            )
            client.put_item(TableName="PinnedIdempotencyTable", Item={"id": {"S": "old"}})

        class TestPinned:
            @pytest.fixture
            def idempotency_table_name(self):
                return "PinnedIdempotencyTable"

            @pytest.mark.parametrize("run", [1, 2])
            def test_pinned(self, idempotency_dynamodb_table, run):
                client = boto3.client("dynamodb")
                assert "PinnedIdempotencyTable" == idempotency_dynamodb_table
                assert 0 == client.scan(TableName=idempotency_dynamodb_table)["Count"]
                client.put_item(TableName=idempotency_dynamodb_table, Item={"id": {"S": "x"}})
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
