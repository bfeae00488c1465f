package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageHasDoc checks that every package explains its job in a
// doc.go whose comment starts "Package <name>" (STYLE.md habit 8).
func TestEveryPackageHasDoc(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata" {
			continue
		}
		gofiles, _ := filepath.Glob(filepath.Join(e.Name(), "*.go"))
		if len(gofiles) == 0 {
			continue
		}
		found++
		doc := filepath.Join(e.Name(), "doc.go")
		f, err := parser.ParseFile(token.NewFileSet(), doc, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Errorf("%s: %v", e.Name(), err)
			continue
		}
		want := "Package " + f.Name.Name + " "
		if f.Doc == nil || !strings.HasPrefix(f.Doc.Text(), want) {
			t.Errorf("%s has no package comment starting %q", doc, want)
		}
	}
	if found < 5 {
		t.Errorf("found %d packages, want at least 5 (engine, eventlog, luart, stdlib, scripts)", found)
	}
}
