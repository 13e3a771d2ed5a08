package gates64consts

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/gdnsimd/gdnsimd/asm/internal/golit"
)

// TestMatchesGates reads ../../../gdn_generic_gates.go (the asm module never
// imports the library) and checks every constant of the table against the literal there: the
// named constants, the three polynomials, softplus64's literal 20 and exp64's 0.5.
func TestMatchesGates(t *testing.T) {
	named := map[string]float64{}
	arrays := map[string][]float64{}
	var softplusLits, exp64Lits []float64
	lit := func(e ast.Expr) (float64, bool) { return golit.Float(e, 64) }
	for _, file := range []string{"../../../gdn_generic_gates.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if i >= len(n.Values) {
						continue
					}
					if v, ok := lit(n.Values[i]); ok {
						named[id.Name] = v
					}
					if c, ok := n.Values[i].(*ast.CompositeLit); ok {
						var vs []float64
						for _, e := range c.Elts {
							if v, ok := lit(e); ok {
								vs = append(vs, v)
							}
						}
						if len(vs) == len(c.Elts) {
							arrays[id.Name] = vs
						}
					}
				}
			case *ast.FuncDecl:
				var into *[]float64
				switch n.Name.Name {
				case "softplus64":
					into = &softplusLits
				case "exp64":
					into = &exp64Lits
				default:
					return false
				}
				ast.Inspect(n.Body, func(m ast.Node) bool {
					if e, ok := m.(ast.Expr); ok {
						if v, ok := lit(e); ok {
							*into = append(*into, v)
						}
					}
					return true
				})
				return false
			}
			return true
		})
	}
	for _, c := range []struct {
		name string
		got  float64
	}{{"exp64Hi", Hi}, {"exp64Lo", Lo}, {"expMagic", Magic}, {"log2e64", Log2e}, {"ln2Hi64", Ln2Hi},
		{"ln2Lo64", Ln2Lo}, {"ln2Half", Ln2Half}, {"log1p01Tiny", Tiny}, {"nearOne", NearOne},
		{"GateSoftplus", FormSoftplus}, {"GateBounded", FormBounded}} {
		if want, ok := named[c.name]; !ok || c.got != want {
			t.Errorf("%s = %v in the table, %v (found %v) in the Go code", c.name, c.got, want, ok)
		}
	}
	for _, c := range []struct {
		name string
		got  []float64
	}{{"exp64P", ExpP[:]}, {"log1p01P", Log1pP[:]}, {"expm1NearP", Expm1P[:]}} {
		want := arrays[c.name]
		if len(want) != len(c.got) {
			t.Fatalf("%s: %d coefficients in the Go code, %d in the table", c.name, len(want), len(c.got))
		}
		for i := range want {
			if want[i] != c.got[i] {
				t.Errorf("%s[%d] = %v in the table, %v in the Go code", c.name, i, c.got[i], want[i])
			}
		}
	}
	// softplus64's threshold, exp64's 0.5 of k1 = round(k/2).
	has := func(vs []float64, v float64) bool {
		for _, x := range vs {
			if x == v {
				return true
			}
		}
		return false
	}
	if !has(softplusLits, Twenty) {
		t.Errorf("softplus64's literals %v have no %v", softplusLits, Twenty)
	}
	if !has(exp64Lits, Half) {
		t.Errorf("exp64's literals %v have no %v", exp64Lits, Half)
	}
}
