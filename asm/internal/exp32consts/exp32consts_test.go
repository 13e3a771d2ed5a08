package exp32consts

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/gdnsimd/gdnsimd/asm/internal/golit"
)

// TestMatchesExp32 reads Exp32 in ../../../gdn_generic_gates.go (the asm module never imports the
// library) and checks that every constant of the table is the float32 of the literal there.
func TestMatchesExp32(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../../gdn_generic_gates.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var body *ast.BlockStmt
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "exp32" {
			body = fd.Body
		}
	}
	if body == nil {
		t.Fatal("no func exp32 in gdn_generic_gates.go")
	}
	named := map[string]float32{}
	var poly []float32 // float literals of the p := …; p = p*r + … statements, in order
	lit := func(e ast.Expr) (float32, bool) {
		v, ok := golit.Float(e, 32)
		return float32(v), ok
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if v, ok := lit(n.Values[i]); ok {
					named[id.Name] = v
				}
			}
		case *ast.AssignStmt:
			if id, ok := n.Lhs[0].(*ast.Ident); !ok || id.Name != "p" {
				return true
			}
			ast.Inspect(n.Rhs[0], func(m ast.Node) bool {
				if e, ok := m.(ast.Expr); ok {
					if v, ok := lit(e); ok && v != 1 { // the 1 of p·r·r + r + 1 is One
						poly = append(poly, v)
					}
				}
				return true
			})
		}
		return true
	})
	for _, c := range []struct {
		name string
		got  float32
	}{{"hi", Hi}, {"lo", Lo}, {"log2e", Log2e}, {"c1", C1}, {"c2", C2}} {
		if want, ok := named[c.name]; !ok || c.got != want {
			t.Errorf("%s = %v in the table, %v (found %v) in Exp32", c.name, c.got, want, ok)
		}
	}
	if len(poly) != len(P) {
		t.Fatalf("Exp32 has %d polynomial literals %v, the table %d", len(poly), poly, len(P))
	}
	for i := range P {
		if P[i] != poly[i] {
			t.Errorf("P[%d] = %v in the table, %v in Exp32", i, P[i], poly[i])
		}
	}
}
