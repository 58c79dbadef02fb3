package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
)

// A charge whose response is lost is ambiguous: the caller reconciles with
// Lookup, and may then retry safely because the provider deduplicates by
// reference.
func ExampleClient_Charge() {
	srv := httptest.NewServer(providersim.New())
	defer srv.Close()
	client := provider.NewClient(srv.URL, "", provider.WithHTTPClient(srv.Client()))
	ctx := context.Background()

	req := provider.ChargeRequest{Reference: "order-42", Amount: 1999, Currency: "EUR", Source: providersim.SourceTimeoutOnce}
	_, err := client.Charge(ctx, req)
	switch {
	case errors.Is(err, provider.ErrUnavailable):
		fmt.Println("not processed: safe to retry")
	case errors.Is(err, provider.ErrAmbiguous):
		found, err := client.Lookup(ctx, req.Reference)
		if err != nil {
			fmt.Println("lookup failed:", err)
			return
		}
		fmt.Println("ambiguous; lookup says", found.Status)
		retried, err := client.Charge(ctx, req)
		if err != nil {
			fmt.Println("retry failed:", err)
			return
		}
		fmt.Println("retry returns the same charge:", retried.ChargeID == found.ChargeID)
	case err != nil:
		fmt.Println("rejected:", err)
	}
	// Output:
	// ambiguous; lookup says charged
	// retry returns the same charge: true
}
