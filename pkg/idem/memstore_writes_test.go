// memstore's business writes, held to DynamoDB's verdicts on the same
// commits. They need the emulator, so they live here rather than in package
// memstore, whose tests make check runs without one.

package idem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// rows builds business writes on a table of rows: keyed by id, or, in a
// single-table layout, by PK (the same for every row) and SK (the id). A
// condition names the key as #k: id, or PK alone, as DynamoDB's idiom
// for a composite key has it.
type rows struct {
	table     string
	composite bool
}

// rowsTable creates on the emulator the table rows writes to: keyed by id,
// or by PK and SK when composite.
func rowsTable(t *testing.T, composite bool) rows {
	t.Helper()
	def := &dynamodb.CreateTableInput{
		TableName:            aws.String("rows"),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}
	if composite {
		def.AttributeDefinitions = []types.AttributeDefinition{
			{AttributeName: aws.String("PK"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("SK"), AttributeType: types.ScalarAttributeTypeS},
		}
		def.KeySchema = []types.KeySchemaElement{
			{AttributeName: aws.String("PK"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("SK"), KeyType: types.KeyTypeRange},
		}
	}
	return rows{table: dynamotest.Table(t, def), composite: composite}
}

// memRows is memstore with the key of rows' table declared.
func memRows(composite bool) (*memstore.Store, rows) {
	s, r := memstore.New(), rows{table: "rows", composite: composite}
	if composite {
		s.DeclareKey(r.table, "PK", "SK")
	} else {
		s.DeclareKey(r.table, "id")
	}
	return s, r
}

// there reports whether row id of r is in db's table.
func (r rows) there(t *testing.T, db *dynamodb.Client, id string) bool {
	ctx := t.Context()
	t.Helper()
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: r.key(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Item) > 0
}

// onBothStores runs run on memstore and on the DynamoDB store, each with a
// rows table keyed by id, and a way to tell whether a row is there.
func onBothStores(t *testing.T, run func(t *testing.T, s idem.Backend, r rows, exists func(id string) bool)) {
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		s, r := memRows(false)
		run(t, s, r, func(id string) bool { return s.Has(r.table, r.key(id)) })
	})
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		db := dynamotest.Client(t)
		s, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("rows-idem")))
		if err != nil {
			t.Fatal(err)
		}
		r := rowsTable(t, false)
		run(t, s, r, func(id string) bool { return r.there(t, db, id) })
	})
}

func (r rows) key(id string) map[string]types.AttributeValue {
	if r.composite {
		return map[string]types.AttributeValue{"PK": str("rows"), "SK": str(id)}
	}
	return map[string]types.AttributeValue{"id": str(id)}
}

// names are a condition's expression attribute names: DynamoDB refuses
// one the expression does not use.
func (r rows) names(cond string) map[string]string {
	switch {
	case !strings.Contains(cond, "#k"):
		return nil
	case r.composite:
		return map[string]string{"#k": "PK"}
	}
	return map[string]string{"#k": "id"}
}

func (r rows) insert(id string) types.TransactWriteItem {
	item := r.key(id)
	item["n"] = str("1")
	cond := "attribute_not_exists(#k)"
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(r.table), Item: item, ConditionExpression: aws.String(cond), ExpressionAttributeNames: r.names(cond),
	}}
}

func (r rows) update(id, cond string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(r.table), Key: r.key(id), ConditionExpression: optional(cond), ExpressionAttributeNames: r.names(cond),
		UpdateExpression: aws.String("SET n = :n"), ExpressionAttributeValues: map[string]types.AttributeValue{":n": str("2")},
	}}
}

func (r rows) delete(id, cond string) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{
		TableName: aws.String(r.table), Key: r.key(id), ConditionExpression: optional(cond), ExpressionAttributeNames: r.names(cond),
	}}
}

func (r rows) check(id, cond string) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(r.table), Key: r.key(id), ConditionExpression: aws.String(cond), ExpressionAttributeNames: r.names(cond),
	}}
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

// commit begins a new key on s and commits writes under it, and returns
// the index of the write *idem.WriteConditionError names (-1 for none);
// after a failed condition the record must still be IN_FLIGHT.
func commit(t *testing.T, s idem.Backend, writes ...types.TransactWriteItem) int {
	ctx := t.Context()
	t.Helper()
	k := idemtest.UniqueKey(t, "acme")
	b, err := s.Begin(ctx, k, fpA, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Commit(ctx, b.Lease, idem.Response{Status: 201}, writes...)
	var wce *idem.WriteConditionError
	switch {
	case err == nil:
		return -1
	case !errors.As(err, &wce) || !errors.Is(err, idem.ErrWriteCondition):
		t.Fatalf("commit: %v, want nil or *idem.WriteConditionError", err)
	}
	if rec, err := s.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("record after a failed condition: %+v, %v; want it IN_FLIGHT", rec, err)
	}
	return wce.Index
}

// TestMemstoreWriteConditionsAsDynamoDB: the same commits meet the same verdicts
// on memstore as on DynamoDB: a condition that fails names the same
// write, and leaves the same rows (none of the transaction's). Rows keyed
// by id and rows under PK and SK, conditioned on PK alone, alike: their
// items have more attributes than the key, so memstore needs DeclareKey.
func TestMemstoreWriteConditionsAsDynamoDB(t *testing.T) {
	t.Parallel()
	steps := []struct {
		name   string
		writes func(r rows) []types.TransactWriteItem
		failed int // the write whose condition fails, -1 for none
		after  map[string]bool
	}{
		{"a new row", func(r rows) []types.TransactWriteItem { return ws(r.insert("a")) }, -1, map[string]bool{"a": true}},
		{"a row again, after a new one", func(r rows) []types.TransactWriteItem { return ws(r.insert("b"), r.insert("a")) }, 1, map[string]bool{"b": false}},
		{"an update of a row that is there", func(r rows) []types.TransactWriteItem { return ws(r.update("a", "attribute_exists(#k)")) }, -1, nil},
		{"an update of a row that is not", func(r rows) []types.TransactWriteItem { return ws(r.update("c", "attribute_exists(#k)")) }, 0, map[string]bool{"c": false}},
		{"an unconditioned update creates the row", func(r rows) []types.TransactWriteItem { return ws(r.update("c", "")) }, -1, map[string]bool{"c": true}},
		{"a row an update created", func(r rows) []types.TransactWriteItem { return ws(r.insert("c")) }, 0, nil},
		{"conditions joined by AND", func(r rows) []types.TransactWriteItem {
			return ws(r.update("c", "attribute_exists(#k) AND attribute_not_exists(#k)"))
		}, 0, nil},
		{"a check that fails keeps the other write out", func(r rows) []types.TransactWriteItem {
			return ws(r.insert("d"), r.check("e", "attribute_exists(#k)"))
		}, 1, map[string]bool{"d": false}},
		{"a check that holds", func(r rows) []types.TransactWriteItem {
			return ws(r.insert("d"), r.check("a", "attribute_exists(#k)"))
		}, -1, map[string]bool{"d": true}},
		{"a delete of a row that is there", func(r rows) []types.TransactWriteItem { return ws(r.delete("a", "attribute_exists(#k)")) }, -1, map[string]bool{"a": false}},
		{"a delete of a row that is not", func(r rows) []types.TransactWriteItem { return ws(r.delete("a", "attribute_exists(#k)")) }, 0, nil},
		{"a deleted row inserted again", func(r rows) []types.TransactWriteItem { return ws(r.insert("a")) }, -1, map[string]bool{"a": true}},
	}
	run := func(t *testing.T, s idem.Backend, r rows, exists func(id string) bool) {
		for _, st := range steps {
			if got := commit(t, s, st.writes(r)...); got != st.failed {
				t.Errorf("%s: failed write %d, want %d", st.name, got, st.failed)
			}
			for id, want := range st.after {
				if got := exists(id); got != want {
					t.Errorf("%s: row %s there = %v, want %v", st.name, id, got, want)
				}
			}
		}
	}
	db := dynamotest.Client(t)
	for _, composite := range []bool{false, true} {
		t.Run(map[bool]string{false: "keyed by id", true: "PK and SK"}[composite], func(t *testing.T) {
			t.Parallel()
			t.Run("memstore", func(t *testing.T) {
				t.Parallel()
				s, r := memRows(composite)
				run(t, s, r, func(id string) bool { return s.Has(r.table, r.key(id)) })
			})
			t.Run("dynamodb", func(t *testing.T) {
				t.Parallel()
				s, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("memstore")))
				if err != nil {
					t.Fatal(err)
				}
				r := rowsTable(t, composite)
				run(t, s, r, func(id string) bool { return r.there(t, db, id) })
			})
		})
	}
}

func ws(w ...types.TransactWriteItem) []types.TransactWriteItem { return w }

// TestMemstorePutConditionOnPartOfTheKey: a Put names no key, and
// DynamoDB checks its condition on the item with its item's key. On a
// table without a declared key memstore cannot tell which attributes of
// an item of several are the key, so it refuses a conditioned Put of one,
// whatever its condition names (the whole key or part of it), with
// errors.ErrUnsupported, and writes nothing. With the key declared, it is
// exact either way: a row of another tenant with the same id is another
// item.
func TestMemstorePutConditionOnPartOfTheKey(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	put := func(tenant, cond string) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String("charges"), Item: map[string]types.AttributeValue{"tenant": str(tenant), "id": str("ch_1")},
			ConditionExpression: aws.String(cond),
		}}
	}
	s := memstore.New()
	for _, cond := range []string{"attribute_not_exists(id)", "attribute_not_exists(tenant) AND attribute_not_exists(id)"} {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Commit(ctx, b.Lease, idem.Response{Status: 201}, put("acme", cond))
		if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "DeclareKey") {
			t.Fatalf("key not declared: acme's charge with %s: %v, want a refusal wrapping errors.ErrUnsupported that names DeclareKey", cond, err)
		}
		if rec, err := s.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight || len(s.Writes()) != 0 {
			t.Fatalf("after the refusal: record %+v, %v, writes %v; want IN_FLIGHT and nothing written", rec, err, s.Writes())
		}
	}

	declared := memstore.New()
	declared.DeclareKey("charges", "tenant", "id")
	for _, c := range []struct {
		tenant, cond string
		failed       int
	}{
		{"acme", "attribute_not_exists(id)", -1},
		{"initech", "attribute_not_exists(id)", -1},
		{"acme", "attribute_not_exists(id)", 0},
		{"acme", "attribute_exists(id)", -1}, // replaces acme's row
		{"umbrella", "attribute_exists(tenant)", 0},
	} {
		if got := commit(t, declared, put(c.tenant, c.cond)); got != c.failed {
			t.Errorf("key declared: %s's charge with %s: failed write %d, want %d", c.tenant, c.cond, got, c.failed)
		}
	}
}

// TestMemstorePutConditionOnNonKeyAttribute: a Put conditioned on
// attribute_not_exists of a NON-key attribute. DynamoDB evaluates the
// condition on the item with the Put's key, finds the attribute there and
// cancels the transaction. memstore must never be laxer: it used to take
// the named attribute for the key on a table without a declared key, look
// for another item holding the same value, find none, and commit. It now
// refuses the Put (errors.ErrUnsupported, naming DeclareKey) without a
// declared key, and with one refuses the condition on an attribute outside
// it: either way nothing is written and the record stays IN_FLIGHT.
func TestMemstorePutConditionOnNonKeyAttribute(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	put := func(table, n, cond string) types.TransactWriteItem {
		p := &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{"id": str("a"), "n": str(n)}}
		if cond != "" {
			p.ConditionExpression = aws.String(cond)
		}
		return types.TransactWriteItem{Put: p}
	}
	db := dynamotest.Client(t)
	ds, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("memstore")))
	if err != nil {
		t.Fatal(err)
	}
	table := rowsTable(t, false).table
	if got := commit(t, ds, put(table, "1", "")); got != -1 {
		t.Fatalf("DynamoDB: first put: failed write %d", got)
	}
	// Only if the row has not been stamped yet: it has (n = 1).
	dynamo := commit(t, ds, put(table, "2", "attribute_not_exists(n)"))
	if dynamo != 0 {
		t.Fatalf("DynamoDB: failed write %d, want 0 (the row has n)", dynamo)
	}

	for _, declared := range []bool{false, true} {
		s := memstore.New()
		if declared {
			s.DeclareKey("rows", "id")
		}
		if got := commit(t, s, put("rows", "1", "")); got != -1 {
			t.Fatalf("memstore (key declared: %v): first put: failed write %d", declared, got)
		}
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Commit(ctx, b.Lease, idem.Response{Status: 201}, put("rows", "2", "attribute_not_exists(n)"))
		var wce *idem.WriteConditionError
		t.Logf("DynamoDB: failed write %d; memstore (key declared: %v): %v", dynamo, declared, err)
		switch {
		case err == nil:
			t.Fatalf("memstore (key declared: %v) commits a Put DynamoDB cancels (failed write %d): laxer, not stricter, and not refused as unsupported", declared, dynamo)
		case errors.As(err, &wce):
			if wce.Index != dynamo {
				t.Fatalf("memstore (key declared: %v): failed write %d, DynamoDB %d", declared, wce.Index, dynamo)
			}
		case !errors.Is(err, errors.ErrUnsupported):
			t.Fatalf("memstore (key declared: %v): %v, want *idem.WriteConditionError or a refusal wrapping errors.ErrUnsupported", declared, err)
		case !declared && !strings.Contains(err.Error(), "DeclareKey"):
			t.Fatalf("memstore, key not declared: the refusal %q does not tell to DeclareKey", err)
		}
		if rec, err := s.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight || len(s.Writes()) != 1 {
			t.Fatalf("memstore (key declared: %v) after the refusal: record %+v, %v, writes %v; want IN_FLIGHT and only the first put written", declared, rec, err, s.Writes())
		}
	}
}

// TestMemstoreWriteConditionsRefused: a condition memstore cannot evaluate, or a
// request DynamoDB would refuse, fails the Commit rather than pass
// unchecked; the record stays IN_FLIGHT and nothing is written.
func TestMemstoreWriteConditionsRefused(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	r := rows{table: "rows"}
	put := func(cond string, names map[string]string) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String("rows"), Item: map[string]types.AttributeValue{"id": str("x"), "n": str("1")},
			ConditionExpression: aws.String(cond), ExpressionAttributeNames: names,
		}}
	}
	undeclared := func(cond string, item map[string]types.AttributeValue) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String("undeclared"), Item: item, ConditionExpression: aws.String(cond),
		}}
	}
	cases := []struct {
		name        string
		write       types.TransactWriteItem
		unsupported bool // beyond what memstore evaluates; otherwise a request DynamoDB refuses too
	}{
		{"a comparison", put("n = :n", nil), true},
		{"OR", put("attribute_not_exists(id) OR attribute_not_exists(n)", nil), true},
		{"NOT", put("NOT attribute_exists(id)", nil), true},
		{"another function", put("begins_with(id, :p)", nil), true},
		{"a nested path", put("attribute_not_exists(m.id)", nil), true},
		{"a Put of two attributes on a table without a declared key", undeclared("attribute_not_exists(id)", map[string]types.AttributeValue{"id": str("x"), "n": str("1")}), true},
		{"attribute_exists in a Put without a declared key", undeclared("attribute_exists(id)", map[string]types.AttributeValue{"id": str("x"), "n": str("1")}), true},
		{"an attribute outside a one-attribute Put's key", undeclared("attribute_not_exists(n)", map[string]types.AttributeValue{"id": str("x")}), true},
		{"a trailing AND", put("attribute_not_exists(id) AND", nil), true},
		{"an attribute outside an Update's Key", r.update("a", "attribute_exists(n)"), true},
		{"a Key that is not the declared one", types.TransactWriteItem{Delete: &types.Delete{
			TableName: aws.String("declared"), Key: r.key("a"), ConditionExpression: aws.String("attribute_exists(id)"),
		}}, false},
		{"a Put without a declared key attribute", types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String("declared"), Item: map[string]types.AttributeValue{"PK": str("rows")},
		}}, false},
		{"an attribute outside a Put's declared key", put("attribute_not_exists(n)", nil), true},
		{"a name not in ExpressionAttributeNames", put("attribute_not_exists(#id)", map[string]string{"#n": "n"}), false},
		{"a ConditionCheck without a condition", types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String("rows"), Key: r.key("a")}}, false},
		{"no write at all", types.TransactWriteItem{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			s.DeclareKey("declared", "PK", "SK")
			s.DeclareKey("rows", "id")
			k := idemtest.UniqueKey(t, "acme")
			b, err := s.Begin(ctx, k, fpA, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Commit(ctx, b.Lease, idem.Response{Status: 201}, r.insert("y"), c.write)
			if err == nil || errors.Is(err, errors.ErrUnsupported) != c.unsupported || errors.Is(err, idem.ErrWriteCondition) {
				t.Fatalf("commit: %v; want a refusal (wrapping errors.ErrUnsupported: %v)", err, c.unsupported)
			}
			if rec, err := s.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight || len(s.Writes()) != 0 || s.Has("rows", r.key("y")) {
				t.Fatalf("after the refusal: record %+v, %v, writes %v; want IN_FLIGHT and nothing written", rec, err, s.Writes())
			}
		})
	}
}
