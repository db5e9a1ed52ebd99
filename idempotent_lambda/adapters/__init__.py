"""Event-source adapters: API Gateway / ALB / Function URL, SQS batches, DynamoDB Stream batches.

Each adapter follows its source's delivery semantics and is imported from its own module, so a
function that uses one never imports the others.
"""
