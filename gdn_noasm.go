//go:build (!amd64 && !arm64) || purego

package gdnsimd

// available lists the assembly kernels usable on this CPU, best first: none in this build.
var available []*impl
