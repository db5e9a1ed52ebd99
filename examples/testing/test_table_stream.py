import boto3

from idempotent_lambda import IdempotencyConfig, idempotent


def test_the_completed_record_reaches_the_table_stream(idempotency_dynamodb_store, lambda_context):
    table = idempotency_dynamodb_store.table_name
    dynamodb = boto3.client("dynamodb")  # no endpoint_url: the fixture's environment has it
    dynamodb.update_table(
        TableName=table,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )

    @idempotent(
        persistence_store=idempotency_dynamodb_store,
        config=IdempotencyConfig(event_key_jmespath="order_id"),
    )
    def handler(event, context):
        return {"order_id": event["order_id"]}

    handler({"order_id": "o-1"}, lambda_context)

    streams = boto3.client("dynamodbstreams")  # the same local server
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records = streams.get_records(ShardIterator=iterator)["Records"]
    assert records[-1]["dynamodb"]["NewImage"]["status"]["S"] == "COMPLETED"
