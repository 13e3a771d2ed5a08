// Package fuzz holds the differential fuzz tests of gdnsimd; it has no API (everything is in test
// files):
//
//   - FuzzStep derives a shape (B 0–5, KHeads, the GQA ratio 1–6, K and V 1–300, small and odd
//     most often), slice offsets and values (ordinary, tiny, huge, zeros, denormals, very large |a|
//     and |b|, optionally one NaN/Inf) from the fuzz bytes and runs every kernel this CPU has against
//     the float64 oracle (SPEC.md's bounds), against the generic kernel, and in place vs out of place,
//     Workers 1 vs 3 and split head ranges bit for bit.
//   - FuzzAPI throws arbitrary, often malformed lengths, dims, parameters and aliasing at the gdn
//     API: never a panic, an error wrapping the right sentinel exactly when the call is invalid
//     (decided independently here), and nothing written after an error.
//   - TestDrift runs 100k tokens (-long, or GDN_LONG=1; 5k otherwise) through every kernel on small
//     heads against a float64 recurrence.
//
// The seed corpus is in testdata/fuzz; `go test ./fuzz` runs it as plain tests (also under
// GOARCH=arm64 -exec qemu-aarch64). Fuzz with
//
//	go test -run=none -fuzz=FuzzStep -fuzztime=1000000x ./fuzz
//	go test -run=none -fuzz=FuzzAPI -fuzztime=1000000x ./fuzz
package fuzz
