// Package golit reads numeric literals of Go source, for the tests that hold the generator's
// constants to the library's Go code (the asm module never imports the library).
package golit

import (
	"go/ast"
	"go/token"
	"strconv"
)

// Float is the value of e if it is a float or integer literal, or one negated, parsed at bitSize
// (32 or 64) bits.
func Float(e ast.Expr, bitSize int) (float64, bool) {
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.SUB {
		v, ok := Float(u.X, bitSize)
		return -v, ok
	}
	if b, ok := e.(*ast.BasicLit); ok && (b.Kind == token.FLOAT || b.Kind == token.INT) {
		v, err := strconv.ParseFloat(b.Value, bitSize)
		return v, err == nil
	}
	return 0, false
}
