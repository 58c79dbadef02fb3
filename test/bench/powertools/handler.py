"""A charge handler on Powertools for AWS Lambda (Python), for comparison.

It does the work of the naive handler of test/bench (stack_test.go) under
Powertools' idempotency utility, as its documentation sets it up: the
@idempotent decorator on the Lambda handler, a DynamoDBPersistenceLayer on
a table whose partition key is "id" (TTL on "expiration"), the idempotency
key taken from the event (the tenant claim and the Idempotency-Key header)
and the body validated against the stored record. The handler validates the
body, charges the card through the provider simulator under a fresh
reference and writes the charge row with one PutItem. Powertools writes
its record before the handler runs (a conditional PutItem) and completes it
after (an UpdateItem); a replay is the conditional PutItem that fails and
returns the stored record.

What it does not do, and chargeonce does: the charge row and the record's
completion are two writes, not one transaction (a crash between them leaves
a charge whose record says in progress); a lease has no fencing token, so
a stale holder can still complete the record after another took it over;
and nothing finds or reconciles a command whose outcome is unknown (an
in-progress record just expires, and a retry then charges again).
"""

import json
import re
import secrets
from datetime import datetime, timezone

import urllib3
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)

CURRENCY = re.compile(r"^[A-Z]{3}$")


def build(dynamodb, table, charges_table, provider_url, tenant_claim):
    """Return the Lambda handler, on the boto3 DynamoDB client dynamodb."""
    persistence = DynamoDBPersistenceLayer(table_name=table, boto3_client=dynamodb)
    config = IdempotencyConfig(
        event_key_jmespath=(
            f'[requestContext.authorizer.jwt.claims."{tenant_claim}", '
            'headers."idempotency-key"]'
        ),
        payload_validation_jmespath="body",
        raise_on_no_idempotency_key=True,
    )
    http = urllib3.PoolManager(maxsize=64)
    charges_url = provider_url.rstrip("/") + "/v1/charges"

    @idempotent(config=config, persistence_store=persistence)
    def handler(event, context):
        tenant = event["requestContext"]["authorizer"]["jwt"]["claims"][tenant_claim]
        try:
            body = json.loads(event["body"])
            amount, currency = body["amount"], body["currency"]
            source, description = body["source"], body.get("description", "")
        except (ValueError, KeyError, TypeError):
            return {"statusCode": 400}
        if (
            not isinstance(amount, int)
            or amount <= 0
            or not isinstance(currency, str)
            or not CURRENCY.match(currency)
            or not isinstance(source, str)
            or not source
        ):
            return {"statusCode": 400}
        reference, charge_id = "pt_" + secrets.token_hex(12), "ch_" + secrets.token_hex(12)
        resp = http.request(
            "POST",
            charges_url,
            body=json.dumps(
                {"reference": reference, "amount": amount, "currency": currency, "source": source}
            ),
            headers={"Content-Type": "application/json"},
        )
        if resp.status != 200:
            raise RuntimeError(f"provider answered HTTP {resp.status}")
        result = json.loads(resp.data)
        if result.get("status") != "charged":
            raise RuntimeError(f"provider answered {result.get('status')}")
        created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        dynamodb.put_item(
            TableName=charges_table,
            Item={
                "tenant": {"S": tenant},
                "id": {"S": charge_id},
                "amount": {"N": str(amount)},
                "currency": {"S": currency},
                "description": {"S": description},
                "status": {"S": "succeeded"},
                "provider_reference": {"S": reference},
                "provider_charge_id": {"S": result.get("id", "")},
                "created_at": {"S": created},
            },
        )
        answer = {
            "id": charge_id,
            "amount": amount,
            "currency": currency,
            "description": description,
            "status": "succeeded",
            "provider_reference": reference,
            "created_at": created,
        }
        return {
            "statusCode": 201,
            "headers": {"Content-Type": "application/json", "Location": "/charges/" + charge_id},
            "body": json.dumps(answer),
        }

    return handler
