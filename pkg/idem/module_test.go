package idem_test

import (
	"os"
	"regexp"
	"testing"
)

// TestModuleRequiresGo125: the module builds on Go 1.25, the older of the
// two releases Go supports. Raising a dependency to one that needs 1.26
// makes go mod tidy raise this line, and this test fail.
func TestModuleRequiresGo125(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^go 1\.25(\.\d+)?$`).Match(mod) {
		t.Fatalf("go.mod's go line is not 1.25: adopters on Go 1.25 could not build the module\n%s", mod)
	}
	if regexp.MustCompile(`(?m)^toolchain `).Match(mod) {
		t.Fatal("go.mod names a toolchain: an adopter's go command would fetch it")
	}
}
