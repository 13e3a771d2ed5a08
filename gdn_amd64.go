//go:build !purego

package gdnsimd

// available lists the assembly kernels usable on this CPU, best first. The amd64 assembly kernels
// are registered here by CPU feature detection.
var available []*impl
