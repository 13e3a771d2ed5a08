package gofile

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestNoescape: the one //go:noescape rule of both architectures' stubs — a routine whose
// parameters hold a pointer (a slice, a pointer, the stateArgs struct) gets it, one without
// pointers does not.
func TestNoescape(t *testing.T) {
	f := File{Generator: "test", Build: "!purego", Funcs: []Func{
		{Name: "stateX", Params: "(a stateArgs)", Doc: "state"}, {Name: "fmaLoopX", Params: "(n int)", Doc: "fma"},
		{Name: "l2X", Params: "(q, k []float32) (qq, kk, kq float64)"}, {Name: "p", Params: "(x *float32)"},
	}}
	src, err := f.Source()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"stateX": true, "fmaLoopX": false, "l2X": true, "p": true}
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		for name, ne := range want {
			if strings.HasPrefix(l, "func "+name+"(") {
				if got := i > 0 && lines[i-1] == "//go:noescape"; got != ne {
					t.Errorf("%s: //go:noescape %v, want %v", name, got, ne)
				}
				delete(want, name)
			}
		}
	}
	if len(want) != 0 {
		t.Errorf("not declared: %v", want)
	}
}

// TestGeneratedOnly: the Go files written beside the assembly hold generated code only — stubs
// without bodies, the routine tables (var) and constants: no function body, no init, no import.
func TestGeneratedOnly(t *testing.T) {
	for _, file := range []string{"../../../gdn_amd64.go", "../../../gdn_arm64.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Imports) != 0 {
			t.Errorf("%s imports %d packages", file, len(f.Imports))
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Body != nil {
					t.Errorf("%s: func %s has a body (hand-written Go goes in kernels_*.go)", file, d.Name.Name)
				}
			case *ast.GenDecl:
				if d.Tok != token.CONST && d.Tok != token.VAR {
					t.Errorf("%s: a %v declaration", file, d.Tok)
				}
				for _, sp := range d.Specs {
					if vs, ok := sp.(*ast.ValueSpec); ok && d.Tok == token.VAR {
						for _, v := range vs.Values {
							if _, ok := v.(*ast.CompositeLit); !ok {
								t.Errorf("%s: var %s is not a table literal", file, vs.Names[0].Name)
							}
						}
					}
				}
			}
		}
	}
}
