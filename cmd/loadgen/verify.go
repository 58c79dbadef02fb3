package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/benchout"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// ledgerEntries fetches the provider simulator's ledger.
func ledgerEntries(ctx context.Context, hc *http.Client, providerURL string) (map[string]providersim.LedgerEntry, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(providerURL, "/")+"/v1/ledger", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ledger: HTTP %d", resp.StatusCode)
	}
	var l providersim.Ledger
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return l.References, nil
}

// chargeRows returns the idempotency key of every row of tenant in the
// charges table, a page at a time.
func chargeRows(ctx context.Context, db dynamodb.QueryAPIClient, table, tenant string) ([]string, error) {
	p := dynamodb.NewQueryPaginator(db, &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("#t = :t"),
		ProjectionExpression:      aws.String("#k"),
		ExpressionAttributeNames:  map[string]string{"#t": charge.AttrTenant, "#k": "idempotency_key"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: tenant}},
	})
	var keys []string
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("charges table %s: %w", table, err)
		}
		for _, item := range page.Items {
			k, _ := item["idempotency_key"].(*types.AttributeValueMemberS)
			if k == nil {
				return nil, fmt.Errorf("charges table %s: a row of %s has no idempotency_key", table, tenant)
			}
			keys = append(keys, k.Value)
		}
	}
	return keys, nil
}

// checked is a check's figures. It also holds which logical charges it
// found missing (their indexes), for describeMissing.
type checked struct {
	benchout.Check
	missing []int
}

// check compares the best answer the API gave with the ledger and the rows.
// It does so for each logical charge (its key and provider reference).
func check(keys, refs []string, answers [][]outcome, ledger map[string]providersim.LedgerEntry, rows []string) checked {
	c := checked{Check: benchout.Check{Logical: len(keys), Rows: len(rows)}}
	rowsOf := make(map[string]int, len(rows))
	for _, k := range rows {
		rowsOf[k]++
	}
	for i, key := range keys {
		created, answered := false, false
		for _, o := range answers[i] {
			created = created || o.status == http.StatusCreated
			answered = answered || (o.status >= 200 && o.status < 500)
		}
		e := ledger[refs[i]]
		charged := e.Charges == 1 && e.Status == provider.StatusCharged
		n := rowsOf[key]
		delete(rowsOf, key)
		c.ProviderCalls += e.Calls
		c.Duplicates += max(0, e.Calls-1) + max(0, n-1)
		if charged {
			c.LedgerCharges++
		}
		if created {
			c.Created++
		}
		if !answered {
			c.Unanswered++
		}
		if (created && !(charged && n > 0)) || charged != (n > 0) {
			c.Missing++
			c.missing = append(c.missing, i)
		}
	}
	for _, n := range rowsOf {
		c.Stray += n
	}
	c.OK = c.Duplicates == 0 && c.Missing == 0 && c.Stray == 0 && c.Unanswered == 0 &&
		c.Created == c.Logical && c.LedgerCharges == c.Logical && c.Rows == c.Logical
	return c
}

// describeMissing writes what the records of the first few missing logical
// charges say. That tells a command the stack has still to resolve
// (IN_FLIGHT) from one it settled without its row.
func describeMissing(ctx context.Context, w io.Writer, db dynamostore.DynamoDBAPI, idemTable, tenant string, keys []string, missing []int) error {
	store, err := dynamostore.New(db, idemTable)
	if err != nil {
		return err
	}
	for _, i := range missing[:min(len(missing), 5)] {
		rec, err := recordOf(ctx, store, tenant, keys[i])
		switch {
		case err != nil:
			return fmt.Errorf("missing %s: %w", keys[i], err)
		case rec == nil:
			fmt.Fprintf(w, "loadgen: missing %s: no record\n", keys[i])
		default:
			fmt.Fprintf(w, "loadgen: missing %s: record %s, %d take-overs, lease until %s\n",
				keys[i], rec.Status, rec.Attempts, rec.LeaseExpiresAt.Format(time.RFC3339))
		}
	}
	return nil
}
