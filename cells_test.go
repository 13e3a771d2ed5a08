package gdnsimd_test

import (
	"runtime"
	"testing"

	"github.com/gdnsimd/gdnsimd"
)

// TestCellsFilled: every kernel this build has implements every state format — on amd64 and
// arm64 the assembly kernels too, so no format silently falls back to the portable kernel. A
// kernel listed by AllNames that this CPU lacks is checked where it runs (the CI legs).
func TestCellsFilled(t *testing.T) {
	for _, k := range gdnsimd.Kernels() {
		for _, f := range gdnsimd.Formats() {
			if !k.Implements(f) {
				t.Errorf("%s/%s: kernel %s does not implement format %v (an empty cell)", runtime.GOARCH, k.Name(), k.Name(), f)
			}
		}
	}
	if len(gdnsimd.Formats()) != 4 {
		t.Fatalf("Formats() = %v, want the 4 layouts × storages", gdnsimd.Formats())
	}
}
