import boto3
import moto

from idempotent_lambda import DynamoDBPersistenceLayer, IdempotencyConfig, idempotent
from idempotent_lambda.testing import create_idempotency_table


@moto.mock_aws
def test_with_dynamodb(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # moto needs credentials, any will do
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_idempotency_table(client, table_name="idem")
    store = DynamoDBPersistenceLayer("idem", boto3_client=client)

    @idempotent(persistence_store=store, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event, context):
        return {"order_id": event["order_id"]}

    assert handler({"order_id": "o-1"}, None) == handler({"order_id": "o-1"}, None)
    assert client.scan(TableName="idem")["Count"] == 1  # one record, COMPLETED
