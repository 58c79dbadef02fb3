package charge

import (
	"maps"
	"os"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestSpecListsTheKnownCurrencies: api/openapi.yaml's currency enum is
// exactly the list the handler accepts, so a client (or Schemathesis)
// that sends any code the spec allows is not refused.
func TestSpecListsTheKnownCurrencies(t *testing.T) {
	raw, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Components struct {
			Schemas struct {
				ChargeRequest struct {
					Properties struct {
						Currency struct {
							Enum []string `yaml:"enum"`
						} `yaml:"currency"`
					} `yaml:"properties"`
				} `yaml:"ChargeRequest"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	got := spec.Components.Schemas.ChargeRequest.Properties.Currency.Enum
	want := slices.Sorted(maps.Keys(iso4217))
	if !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("the spec's currency enum %v\ndiffers from the handler's list %v", got, want)
	}
}
