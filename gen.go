package gdnsimd

// gdn_amd64.s is written by the avo program in asm/, gdn_arm64.s by the text emitter in asm/neon;
// asm/ is a module of its own. Run go generate with GOARCH unset; the output must be byte-identical
// to the committed files (.ci/run checks both).

//go:generate go -C asm run . -out ../gdn_amd64.s -args ../gdn_args.go -go ../gdn_amd64.go
//go:generate go -C asm run ./neon -out ../gdn_arm64.s -go ../gdn_arm64.go
