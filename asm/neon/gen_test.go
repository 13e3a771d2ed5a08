package main

import (
	"bytes"
	"os"
	"testing"
)

// arm64File is the committed output of this generator.
const arm64File = "../../gdn_arm64.s"

// TestGeneratedFileIsCurrent runs the generator twice in-process: the output must not vary, and it
// must be ../../gdn_arm64.s byte for byte.
func TestGeneratedFileIsCurrent(t *testing.T) {
	got := generate()
	if !bytes.Equal(got, generate()) {
		t.Fatal("two runs of the generator differ")
	}
	want, err := os.ReadFile(arm64File)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range max(len(g), len(w)) {
			if i >= len(g) || i >= len(w) || !bytes.Equal(g[i], w[i]) {
				var gl, wl []byte
				if i < len(g) {
					gl = g[i]
				}
				if i < len(w) {
					wl = w[i]
				}
				t.Fatalf("%s is not what asm/neon writes (run go generate ./... in the repository root): line %d is\n\t%q\nwant\n\t%q", arm64File, i+1, wl, gl)
			}
		}
	}
}
