package gdnsimd

// gdn_amd64.s is written by the avo program in asm/, a module of its own. Run go generate with
// GOARCH unset; the output must be byte-identical to the committed file (.ci/run checks it).

//go:generate go -C asm run . -out ../gdn_amd64.s
