// A charge handler on Powertools for AWS Lambda (TypeScript), for
// comparison: the same work as the Python one beside it
// (../powertools/handler.py), set up as Powertools' documentation sets it
// up. makeIdempotent wraps the Lambda handler, with a
// DynamoDBPersistenceLayer on a table whose partition key is "id" (TTL on
// "expiration"); the idempotency key is the tenant claim and the
// Idempotency-Key header, and the body is validated against the stored
// record. The handler validates the body, charges the card through the
// provider simulator under a fresh reference and writes the charge row
// with one PutItem. Powertools writes its record before the handler runs
// (a conditional PutItem) and completes it after (an UpdateItem); a replay
// is the conditional PutItem that fails and returns the stored record.
//
// What it does not do, and chargeonce does, is what the Python handler
// does not do either: the charge row and the record's completion are two
// writes, not one transaction; a lease has no fencing token; and nothing
// reconciles a command whose outcome is unknown.

import { randomBytes } from 'node:crypto';
import { PutItemCommand } from '@aws-sdk/client-dynamodb';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';

const CURRENCY = /^[A-Z]{3}$/;

const hex = (n) => randomBytes(n).toString('hex');

// build returns the Lambda handler, on the DynamoDB client dynamodb.
export function build(dynamodb, table, chargesTable, providerURL, tenantClaim) {
  const persistenceStore = new DynamoDBPersistenceLayer({ tableName: table, awsSdkV3Client: dynamodb });
  const config = new IdempotencyConfig({
    eventKeyJmesPath: `[requestContext.authorizer.jwt.claims."${tenantClaim}", headers."idempotency-key"]`,
    payloadValidationJmesPath: 'body',
    throwOnNoIdempotencyKey: true,
  });
  const chargesURL = providerURL.replace(/\/+$/, '') + '/v1/charges';

  const handler = async (event) => {
    const tenant = event.requestContext.authorizer.jwt.claims[tenantClaim];
    let body;
    try {
      body = JSON.parse(event.body);
    } catch {
      return { statusCode: 400 };
    }
    const { amount, currency, source, description = '' } = body ?? {};
    if (!Number.isInteger(amount) || amount <= 0 || typeof currency !== 'string' || !CURRENCY.test(currency)
      || typeof source !== 'string' || !source) {
      return { statusCode: 400 };
    }
    const reference = 'pt_' + hex(12);
    const chargeID = 'ch_' + hex(12);
    const resp = await fetch(chargesURL, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ reference, amount, currency, source }),
    });
    if (resp.status !== 200) {
      throw new Error(`provider answered HTTP ${resp.status}`);
    }
    const result = await resp.json();
    if (result.status !== 'charged') {
      throw new Error(`provider answered ${result.status}`);
    }
    const created = new Date().toISOString();
    await dynamodb.send(new PutItemCommand({
      TableName: chargesTable,
      Item: {
        tenant: { S: tenant },
        id: { S: chargeID },
        amount: { N: String(amount) },
        currency: { S: currency },
        description: { S: description },
        status: { S: 'succeeded' },
        provider_reference: { S: reference },
        provider_charge_id: { S: result.id ?? '' },
        created_at: { S: created },
      },
    }));
    const answer = { id: chargeID, amount, currency, description, status: 'succeeded', provider_reference: reference, created_at: created };
    return {
      statusCode: 201,
      headers: { 'Content-Type': 'application/json', Location: '/charges/' + chargeID },
      body: JSON.stringify(answer),
    };
  };
  return makeIdempotent(handler, { persistenceStore, config });
}
