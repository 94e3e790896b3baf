//go:build !purego

package kernel

//go:generate go run -C _asm ./prefetch -out ../prefetch_amd64.s -stubs ../prefetch_stubs_amd64.go -pkg kernel

// prefetch asks for lines ≥ 1 cache lines from p in L2 (prefetchL2).
func prefetch(p *float32, lines int) { prefetchL2(p, lines) }
