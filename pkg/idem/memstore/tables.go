package memstore

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// item is a business table's item as memstore knows it. It is a Put's
// item, or the key of an Update that created it.
type item = map[string]types.AttributeValue

// tables are the business tables, by name, as committed writes left them.
// Their items are matched by key attribute values only. So an item may
// appear twice, after two unconditioned Puts of it. That changes no
// answer.
type tables map[string][]item

// write is a business write, parsed. It holds the item it targets, and the
// condition it puts on that item.
type write struct {
	table string
	put   item // the Put's item; nil for the other kinds
	// key holds the attribute values that find the targeted item. For an
	// Update, Delete or ConditionCheck, that is its Key. For a Put, it is
	// its item's declared key attributes. On a table without them, it is
	// the item's only attribute, if the Put has a condition. An
	// unconditioned Put there has none.
	key  item
	kind string // "put", "update", "delete" or "check"
	cond []term
}

// term is one attribute_exists (exists) or attribute_not_exists (!exists)
// of a condition.
type term struct {
	attr   string
	exists bool
}

// unsupported explains a condition memstore does not evaluate.
func unsupported(expr, why string) error {
	return fmt.Errorf("memstore: condition %q: %s; memstore evaluates only attribute_exists(a) and attribute_not_exists(a) of key attributes, joined by AND, and a Put's only with its table's key declared (DeclareKey) or an item of one attribute: %w",
		expr, why, errors.ErrUnsupported)
}

// parseWrites reads the business writes of a Commit, given the key
// attributes declared by table. It refuses any whose condition memstore
// cannot evaluate. A condition ignored would let a test pass that DynamoDB
// fails.
func parseWrites(ws []types.TransactWriteItem, declared map[string][]string) ([]write, error) {
	out := make([]write, len(ws))
	for i, tw := range ws {
		w, err := parseWrite(tw, declared)
		if err != nil {
			return nil, fmt.Errorf("business write %d: %w", i, err)
		}
		out[i] = w
	}
	return out, nil
}

func parseWrite(tw types.TransactWriteItem, declared map[string][]string) (write, error) {
	var (
		w      write
		expr   *string
		names  map[string]string
		kinds  int
		hasKey bool
	)
	if p := tw.Put; p != nil {
		kinds++
		w = write{kind: "put", table: aws.ToString(p.TableName), put: p.Item}
		if w.put == nil {
			w.put = item{}
		}
		expr, names = p.ConditionExpression, p.ExpressionAttributeNames
	}
	if u := tw.Update; u != nil {
		kinds++
		w = write{kind: "update", table: aws.ToString(u.TableName), key: u.Key}
		expr, names, hasKey = u.ConditionExpression, u.ExpressionAttributeNames, true
	}
	if d := tw.Delete; d != nil {
		kinds++
		w = write{kind: "delete", table: aws.ToString(d.TableName), key: d.Key}
		expr, names, hasKey = d.ConditionExpression, d.ExpressionAttributeNames, true
	}
	if c := tw.ConditionCheck; c != nil {
		kinds++
		w = write{kind: "check", table: aws.ToString(c.TableName), key: c.Key}
		expr, names, hasKey = c.ConditionExpression, c.ExpressionAttributeNames, true
	}
	switch {
	case kinds != 1:
		return write{}, fmt.Errorf("memstore: want exactly one of Put, Update, Delete and ConditionCheck, got %d", kinds)
	case hasKey && len(w.key) == 0:
		return write{}, fmt.Errorf("memstore: %s of table %q without a Key", w.kind, w.table)
	case w.kind == "check" && expr == nil:
		return write{}, fmt.Errorf("memstore: ConditionCheck of table %q without a condition", w.table)
	}
	if expr != nil {
		var err error
		if w.cond, err = parseCondition(*expr, names); err != nil {
			return write{}, err
		}
	}
	key, isDeclared := declared[w.table]
	switch {
	case isDeclared && w.put != nil:
		w.key = item{}
		for _, a := range key {
			v, ok := w.put[a]
			if !ok {
				return write{}, fmt.Errorf("memstore: the Put's item has no %s, a key attribute of table %q", a, w.table)
			}
			w.key[a] = v
		}
	case isDeclared:
		if len(w.key) != len(key) || slices.ContainsFunc(key, func(a string) bool { _, ok := w.key[a]; return !ok }) {
			return write{}, fmt.Errorf("memstore: the %s's Key is not the key %v declared for table %q", w.kind, key, w.table)
		}
	case w.put != nil && len(w.cond) > 0:
		// A Put names no key. DynamoDB checks its condition on the item
		// with its item's key. Without the table's key declared, memstore
		// knows that key only for an item of one attribute. An item holds
		// the whole key, so that attribute is it. Of an item with more,
		// any attributes could be the key. The condition may name a
		// non-key attribute, or part of the key. Taken as the key, they
		// would look for another item than DynamoDB checks. memstore could
		// then commit what DynamoDB cancels. So it is refused.
		if len(w.put) != 1 {
			return write{}, unsupported(*expr, fmt.Sprintf("a Put of an item of %d attributes on table %q, whose key is not declared: memstore cannot tell which item DynamoDB checks; declare the table's key with DeclareKey", len(w.put), w.table))
		}
		w.key = maps.Clone(w.put)
	}
	for _, t := range w.cond {
		if _, ok := w.key[t.attr]; !ok {
			return write{}, unsupported(*expr, t.attr+" is not a key attribute")
		}
	}
	for a, v := range w.key {
		if !scalar(v) {
			return write{}, fmt.Errorf("memstore: %s is not a string, number or binary value, as a key attribute is", a)
		}
	}
	return w, nil
}

// path is an attribute's name, or an expression attribute name standing
// for one. A nested path (a.b, a[0]) is not a key attribute.
var path = regexp.MustCompile(`^#?[A-Za-z0-9_]+$`)

// parseCondition reads expr as attribute_exists(a) and
// attribute_not_exists(a) terms joined by AND, resolving #names.
func parseCondition(expr string, names map[string]string) ([]term, error) {
	tokens := tokenize(expr)
	var cond []term
	for i := 0; ; {
		if len(tokens) < i+4 || tokens[i+1] != "(" || tokens[i+3] != ")" || !path.MatchString(tokens[i+2]) {
			return nil, unsupported(expr, "not a function of one attribute")
		}
		t := term{attr: tokens[i+2]}
		switch tokens[i] {
		case "attribute_exists":
			t.exists = true
		case "attribute_not_exists":
		default:
			return nil, unsupported(expr, tokens[i]+" is not attribute_exists or attribute_not_exists")
		}
		if strings.HasPrefix(t.attr, "#") {
			name, ok := names[t.attr]
			if !ok {
				return nil, fmt.Errorf("memstore: condition %q: %s is not in ExpressionAttributeNames", expr, t.attr)
			}
			t.attr = name
		}
		cond = append(cond, t)
		i += 4
		switch {
		case i == len(tokens):
			return cond, nil
		case !strings.EqualFold(tokens[i], "AND"):
			return nil, unsupported(expr, tokens[i]+" is not AND")
		}
		i++
	}
}

// tokenize splits expr into parentheses and the words between them.
func tokenize(expr string) []string {
	var tokens []string
	for _, f := range strings.Fields(expr) {
		for f != "" {
			i := strings.IndexAny(f, "()")
			switch {
			case i < 0:
				tokens, f = append(tokens, f), ""
			case i > 0:
				tokens, f = append(tokens, f[:i]), f[i:]
			default:
				tokens, f = append(tokens, f[:1]), f[1:]
			}
		}
	}
	return tokens
}

// failed returns the index of the first write whose condition does not
// hold, or -1. Every condition is evaluated against the tables as they
// were before the transaction, as DynamoDB does.
func (ts tables) failed(ws []write) int {
	for i, w := range ws {
		exists := len(w.key) > 0 && ts.has(w.table, w.key)
		for _, t := range w.cond {
			if t.exists != exists {
				return i
			}
		}
	}
	return -1
}

// apply makes the writes, whose conditions hold. An Update's
// UpdateExpression is not applied. The item keeps the attributes it had,
// or only its key if the Update created it. That is all a condition
// memstore evaluates looks at.
func (ts tables) apply(ws []write) {
	for _, w := range ws {
		switch w.kind {
		case "put":
			if len(w.key) > 0 {
				ts.remove(w.table, w.key)
			}
			ts[w.table] = append(ts[w.table], maps.Clone(w.put))
		case "update":
			if !ts.has(w.table, w.key) {
				ts[w.table] = append(ts[w.table], maps.Clone(w.key))
			}
		case "delete":
			ts.remove(w.table, w.key)
		}
	}
}

// remove deletes the items with key's attribute values from table.
func (ts tables) remove(table string, key item) {
	ts[table] = slices.DeleteFunc(ts[table], func(it item) bool { return matches(it, key) })
}

// has reports whether table holds an item with key's attribute values.
func (ts tables) has(table string, key item) bool {
	return slices.ContainsFunc(ts[table], func(it item) bool { return matches(it, key) })
}

func matches(it, key item) bool {
	for a, v := range key {
		if w, ok := it[a]; !ok || !equal(v, w) {
			return false
		}
	}
	return true
}

func scalar(v types.AttributeValue) bool {
	switch v.(type) {
	case *types.AttributeValueMemberS, *types.AttributeValueMemberN, *types.AttributeValueMemberB:
		return true
	}
	return false
}

// equal compares key attribute values as DynamoDB does. Numbers compare by
// value ("1" is "1.0"). Strings and binaries compare byte for byte.
func equal(a, b types.AttributeValue) bool {
	switch a := a.(type) {
	case *types.AttributeValueMemberS:
		b, ok := b.(*types.AttributeValueMemberS)
		return ok && a.Value == b.Value
	case *types.AttributeValueMemberB:
		b, ok := b.(*types.AttributeValueMemberB)
		return ok && bytes.Equal(a.Value, b.Value)
	case *types.AttributeValueMemberN:
		b, ok := b.(*types.AttributeValueMemberN)
		if !ok {
			return false
		}
		x, okx := new(big.Rat).SetString(a.Value)
		y, oky := new(big.Rat).SetString(b.Value)
		return okx && oky && x.Cmp(y) == 0
	}
	return false
}
