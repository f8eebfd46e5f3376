package rdb

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestScripts checks that Scripts lists every script of the package: as
// many distinct scripts as the package's files make with redis.NewScript,
// and two for each newProbed.
func TestScripts(t *testing.T) {
	t.Parallel()
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	fset := token.NewFileSet()
	for _, e := range files {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if fn, ok := n.(*ast.FuncDecl); ok && fn.Name.Name == "newProbed" {
				return false // counted at its calls
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "newProbed" {
				at := fset.Position(call.Pos()).String()
				made = append(made, at, at+" (Cluster variant)")
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewScript" {
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "redis" {
					made = append(made, fset.Position(call.Pos()).String())
				}
			}
			return true
		})
	}
	listed := Scripts()
	hashes := make(map[string]string, len(listed))
	for name, s := range listed {
		if other, ok := hashes[s.Hash()]; ok {
			t.Errorf("Scripts lists one script twice, as %s and %s", name, other)
		}
		hashes[s.Hash()] = name
	}
	if len(made) != len(hashes) {
		t.Errorf("the package makes %d scripts but Scripts lists %d: add every script to Scripts in scripts.go\nmade at:\n%s",
			len(made), len(hashes), strings.Join(made, "\n"))
	}
}
