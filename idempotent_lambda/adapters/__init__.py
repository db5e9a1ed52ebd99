"""Event-source adapters: API Gateway / ALB / Function URL, and batches from SQS, DynamoDB
Streams, Kinesis Data Streams and Kafka (Amazon MSK or self-managed).

Each adapter follows its source's delivery semantics and is imported from its own module, so a
function that uses one never imports the others.
"""
