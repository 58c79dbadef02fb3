package deploy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestRegionsTemplateMatchesCode: template-regions.yaml's global tables are
// the code's: template.yaml's two tables, replicated in multi-Region
// eventual consistency to PeerRegion, each replica protected from deletion;
// and the routes and the ledger, keyed as regions.TableInput says, in
// multi-Region strong consistency with a witness, and without TTL, which
// that mode refuses.
func TestRegionsTemplateMatchesCode(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(testkit.RepoRoot(), "template-regions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := parseTemplate(string(src))
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{tmpl: tmpl}
	c.schema(idempotencyTable, dynamostore.TableInput("t"))
	c.ttl(idempotencyTable, dynamostore.TTLInput("t"), dynamostore.AttrExpiresAt)
	c.schema(chargesTable, charge.TableInput("t"))
	for _, id := range []string{"RoutesTable", "LedgerTable"} {
		c.schema(id, regions.TableInput("t"))
		c.equal(id+" MultiRegionConsistency", c.props(id)["MultiRegionConsistency"], "STRONG")
		c.equal(id+" GlobalTableWitnesses", c.props(id)["GlobalTableWitnesses"], []any{map[string]any{"Region": map[string]any{"Ref": "WitnessRegion"}}})
		if c.props(id)["TimeToLiveSpecification"] != nil {
			c.fail("%s has a TTL: multi-Region strong consistency takes none", id)
		}
	}
	for _, id := range []string{idempotencyTable, chargesTable, "RoutesTable", "LedgerTable"} {
		var regions []any
		for _, r := range asList(c.props(id)["Replicas"]) {
			regions = append(regions, asMap(r)["Region"])
			c.equal(id+" replica DeletionProtectionEnabled", asMap(r)["DeletionProtectionEnabled"], true)
		}
		c.equal(id+" Replicas", regions, []any{map[string]any{"Ref": "AWS::Region"}, map[string]any{"Ref": "PeerRegion"}})
	}
	for _, p := range c.problems {
		t.Error(p)
	}
}
