//go:build race

// Package race says whether the binary is built with the race detector (whose instrumentation
// allocates, so that allocation counts mean nothing under it).
package race

// Enabled is true when built with -race.
const Enabled = true
