package gdnsimd

// Exported for the external test package gdnsimd_test, whose piece tests (piece_test.go) iterate
// the kernels with internal/kerneltest: that package imports gdnsimd, so gdnsimd's internal tests
// could not import it.

// Pieces are the three vector pieces of one kernel (see impl).
type Pieces struct {
	State func(sIn, sOut, kh, qh, v, o []float32, em1, eg, beta, kq float32)
	Gate  func(o, z, w []float32, eps float32, out []uint16, outF []float32)
	L2    func(q, k []float32) (qq, kk, kq float64)
}

// PiecesOf returns k's pieces; PiecesOf of the "generic" kernel is the reference.
func PiecesOf(k Kernel) Pieces { return Pieces{State: k.im.state, Gate: k.im.gate, L2: k.im.l2} }
