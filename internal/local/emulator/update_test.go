package emulator_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// TestUpdateStructureChecksAtEveryUse holds the launcher's one-time
// structure checks of an update expression to moto's answers: an
// expression that passed them still fails them under names, or on a
// table, that make it update a key attribute, and one that failed them
// fails every time.
func TestUpdateStructureChecksAtEveryUse(t *testing.T) {
	t.Parallel()
	sd := startSides(t, nil)[0]
	seed(t, sd.db, "h", "r", false)
	updateItem := func(table string, key item, expr string, names map[string]string) string {
		values := item{":v": s("x")}
		if len(expr) > len("SET #a = :v") {
			values[":w"] = s("y")
		}
		_, err := sd.db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key, UpdateExpression: aws.String(expr),
			ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		})
		return errorCode(err)
	}
	for i, st := range []struct {
		table string
		key   item
		expr  string
		names map[string]string
		want  string
	}{
		{"h", hk("h1"), "SET #a = :v", map[string]string{"#a": "v"}, ""},
		{"h", hk("h1"), "SET #a = :v", map[string]string{"#a": "pk"}, "ValidationException"},
		{"h", hk("h1"), "SET #a = :v", map[string]string{"#a": "sk"}, ""},
		{"r", rk("r1", "a"), "SET #a = :v", map[string]string{"#a": "sk"}, "ValidationException"},
		{"h", hk("h1"), "SET #a = :v", map[string]string{"#a": "v"}, ""},
		{"h", hk("h1"), "SET #a = :v, #a = :w", map[string]string{"#a": "v"}, "ValidationException"},
		{"h", hk("h1"), "SET #a = :v, #a = :w", map[string]string{"#a": "v"}, "ValidationException"},
		{"h", hk("h1"), "SET #a = :v, #b = :w", map[string]string{"#a": "v", "#b": "w"}, ""},
		{"h", hk("h1"), "SET #a = :v, #b = :w", map[string]string{"#a": "v", "#b": "v"}, "ValidationException"},
	} {
		if got := updateItem(st.table, st.key, st.expr, st.names); got != st.want {
			t.Errorf("step %d: %s on %s with %v answered %q, want %q", i, st.expr, st.table, st.names, got, st.want)
		}
	}
}
