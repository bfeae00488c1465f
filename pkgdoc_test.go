package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageHasDoc checks that every package of the module, at any
// depth, explains its job in a doc.go whose comment starts "Package <name>"
// (STYLE.md habit 8). The root is package main, documented in main.go.
func TestEveryPackageHasDoc(t *testing.T) {
	found := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || path == "." {
			return nil
		}
		if name := d.Name(); strings.HasPrefix(name, ".") || name == "testdata" {
			return filepath.SkipDir
		}
		if !hasPackageFiles(t, path) {
			return nil
		}
		found++
		doc := filepath.Join(path, "doc.go")
		f, err := parser.ParseFile(token.NewFileSet(), doc, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		want := "Package " + f.Name.Name + " "
		if f.Doc == nil || !strings.HasPrefix(f.Doc.Text(), want) {
			t.Errorf("%s has no package comment starting %q", doc, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 20 {
		t.Errorf("found %d packages, want at least 20 (engine and its packages, eventlog, luart, stdlib, scripts)", found)
	}
}

// hasPackageFiles reports whether dir holds Go files other than tests.
func hasPackageFiles(t *testing.T, dir string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			return true
		}
	}
	return false
}
