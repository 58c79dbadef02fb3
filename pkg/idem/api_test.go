package idem_test

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// updateAPI rewrites the snapshot: go test -run TestAPISnapshot -update-api.
var updateAPI = flag.Bool("update-api", false, "rewrite api/v1.txt from the code")

// apiPackages are the module's packages a user imports.
var apiPackages = []string{".", "dynamostore", "memstore", "idemtest", "lambdaidem"}

// TestAPISnapshot fails when an exported name or signature changes without
// api/v1.txt changing with it, as Go's own api/*.txt do: v1 keeps its API,
// and a change to it is a decision, made in the same commit.
func TestAPISnapshot(t *testing.T) {
	var lines []string
	for _, dir := range apiPackages {
		lines = append(lines, exported(t, dir)...)
	}
	slices.Sort(lines)
	got := strings.Join(lines, "\n") + "\n"
	const file = "api/v1.txt"
	if *updateAPI {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("the exported API differs from %s: if the change is meant, run go test -run TestAPISnapshot -update-api and commit both.\n%s", file, diff(string(want), got))
	}
}

// exported lists dir's exported declarations, one a line, without tests.
func exported(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		pkg := "pkg " + f.Name.Name + ", "
		for _, decl := range f.Decls {
			for _, l := range declLines(fset, decl) {
				out = append(out, pkg+l)
			}
		}
	}
	return out
}

func declLines(fset *token.FileSet, decl ast.Decl) []string {
	show := func(n ast.Node) string {
		var b bytes.Buffer
		_ = printer.Fprint(&b, fset, n)
		return strings.Join(strings.Fields(b.String()), " ")
	}
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || d.Recv != nil && !exportedRecv(d.Recv) {
			return nil
		}
		recv := ""
		if d.Recv != nil {
			recv = "(" + show(d.Recv.List[0].Type) + ") "
		}
		return []string{"func " + recv + d.Name.Name + show(d.Type)[len("func"):]}
	case *ast.GenDecl:
		var out []string
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					out = append(out, typeLines(s, show)...)
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						line := d.Tok.String() + " " + n.Name
						if s.Type != nil {
							line += " " + show(s.Type)
						}
						out = append(out, line)
					}
				}
			}
		}
		return out
	}
	return nil
}

// typeLines gives a type, and each exported field or method of a struct or
// interface on a line of its own.
func typeLines(s *ast.TypeSpec, show func(ast.Node) string) []string {
	head := "type " + s.Name.Name
	if s.TypeParams != nil {
		head += show(s.TypeParams)
	}
	var fields *ast.FieldList
	switch tt := s.Type.(type) {
	case *ast.StructType:
		head, fields = head+" struct", tt.Fields
	case *ast.InterfaceType:
		head, fields = head+" interface", tt.Methods
	default:
		eq := " "
		if s.Assign.IsValid() {
			eq = " = "
		}
		return []string{head + eq + show(s.Type)}
	}
	out := []string{head}
	for _, f := range fields.List {
		if len(f.Names) == 0 {
			out = append(out, head+", embedded "+show(f.Type))
		}
		for _, n := range f.Names {
			if n.IsExported() {
				out = append(out, head+", "+n.Name+" "+show(f.Type))
			}
		}
	}
	return out
}

func exportedRecv(recv *ast.FieldList) bool {
	t := recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if idx, ok := t.(*ast.IndexExpr); ok {
		t = idx.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}

// diff lists the lines only one side has.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
