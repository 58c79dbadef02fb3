package idem_test

import (
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestRecoveryTemplateFollowsTheLayout: the SAM template adopters paste
// names the table, index and attributes the store uses, so its sweeper
// queries an index that exists. sam validate --lint checks the rest.
func TestRecoveryTemplateFollowsTheLayout(t *testing.T) {
	b, err := os.ReadFile("docs/recovery-template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := string(b)
	in := dynamostore.TableInput("t")
	want := []string{
		"IndexName: " + dynamostore.IndexStuckLeases,
		"/index/" + dynamostore.IndexStuckLeases + `"`,
		"AttributeName: " + dynamostore.AttrExpiresAt,
	}
	for _, d := range in.AttributeDefinitions {
		want = append(want, "- AttributeName: "+aws.ToString(d.AttributeName)+"\n          AttributeType: "+string(d.AttributeType))
	}
	for _, a := range in.GlobalSecondaryIndexes[0].Projection.NonKeyAttributes {
		want = append(want, "- "+a+"\n")
	}
	for _, w := range want {
		if !strings.Contains(tmpl, w) {
			t.Errorf("docs/recovery-template.yaml lacks %q", w)
		}
	}
}
