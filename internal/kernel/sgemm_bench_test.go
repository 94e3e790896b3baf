package kernel

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// sgemmBench is one benchmarked Sgemm problem.
type sgemmBench struct {
	name           string
	m, n, k        int
	transA, transB bool
	lda, ldb       int // 0: the operand's width
	beta           float32
}

func sgemmBenches() []sgemmBench {
	var out []sgemmBench
	for _, f := range []struct {
		name   string
		ta, tb bool
	}{{"NN", false, false}, {"NT", false, true}, {"TN", true, false}} {
		out = append(out, sgemmBench{name: "shape=1024x1024x1024/" + f.name, m: 1024, n: 1024, k: 1024, transA: f.ta, transB: f.tb})
	}
	// The projections C = X·Wᵀ with W stored [3E, E], E = 768.
	for _, t := range []int{512, 1024, 2048} {
		out = append(out, sgemmBench{name: fmt.Sprintf("shape=proj-T=%d/NT", t), m: t, n: 2304, k: 768, transB: true})
	}
	// The tiled attention: S = Q·Kᵀ from Q inside [T, 3E] rows and Kᵀ stored [d, T]; O += P·V with
	// V inside [T, 3E] rows.
	for _, s := range [][2]int{{128, 128}, {64, 64}, {128, 64}} {
		out = append(out, sgemmBench{name: fmt.Sprintf("shape=attn-QK-%dx%dx64/NN", s[0], s[1]), m: s[0], n: s[1], k: 64, lda: 2304, ldb: 1024})
	}
	for _, s := range [][2]int{{128, 128}, {64, 64}, {128, 64}} {
		out = append(out, sgemmBench{name: fmt.Sprintf("shape=attn-PV-%dx64x%d/NN", s[0], s[1]), m: s[0], n: 64, k: s[1], ldb: 2304, beta: 1})
	}
	// The layer's backward at E = 768, T = 2048: a weight gradient dW += dYᵀ·X block (A, dY, inside
	// [T, 3E] rows), and the five products of one tile of the attention backward (64 queries,
	// 256 keys, d = 64): the recomputed scores S = Q·Kᵀ, dV += Pᵀ·dO, dP = dO·Vᵀ, dQ += dS·K,
	// dK += dSᵀ·Q, with Q, K, V inside [T, 3E] rows, Kᵀ [d, T] and dO inside [T, E] rows.
	out = append(out,
		sgemmBench{name: "shape=wgrad-256x256x2048/TN", m: 256, n: 256, k: 2048, transA: true, lda: 2304, ldb: 768, beta: 1},
		sgemmBench{name: "shape=bwd-S-64x256x64/NN", m: 64, n: 256, k: 64, lda: 2304, ldb: 2048},
		sgemmBench{name: "shape=bwd-S-64x256x64-ldb2064/NN", m: 64, n: 256, k: 64, lda: 2304, ldb: 2064},
		sgemmBench{name: "shape=bwd-dP-64x256x64-Vt272/NN", m: 64, n: 256, k: 64, lda: 768, ldb: 272},
		sgemmBench{name: "shape=bwd-dP-64x256x64-Vt256/NN", m: 64, n: 256, k: 64, lda: 768, ldb: 256},
		sgemmBench{name: "shape=bwd-dV-256x64x64/TN", m: 256, n: 64, k: 64, transA: true, lda: 256, ldb: 768, beta: 1},
		sgemmBench{name: "shape=bwd-dP-64x256x64/NT", m: 64, n: 256, k: 64, transB: true, lda: 768, ldb: 2304},
		sgemmBench{name: "shape=bwd-dQ-64x64x256/NN", m: 64, n: 64, k: 256, lda: 256, ldb: 2304, beta: 1},
		sgemmBench{name: "shape=bwd-dK-256x64x64/TN", m: 256, n: 64, k: 64, transA: true, lda: 256, ldb: 2304, beta: 1},
	)
	return out
}

// BenchmarkSgemm measures Sgemm on one goroutine per instruction set and shape, reporting
// GFLOP/s (2·m·n·k per call).
func BenchmarkSgemm(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, is := range available() {
		for _, s := range sgemmBenches() {
			b.Run(fmt.Sprintf("isa=%v/%s", is, s.name), func(b *testing.B) {
				ar, ac := s.m, s.k
				if s.transA {
					ar, ac = s.k, s.m
				}
				br, bc := s.k, s.n
				if s.transB {
					br, bc = s.n, s.k
				}
				lda, ldb := max(s.lda, ac), max(s.ldb, bc)
				a := to32(randSlice(r, ar*lda))
				bm := to32(randSlice(r, br*ldb))
				c := to32(randSlice(r, s.m*s.n))
				var w Workspace
				w.sgemm(is, s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, s.beta, c, s.n, nil)
				b.ResetTimer()
				for b.Loop() {
					w.sgemm(is, s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, s.beta, c, s.n, nil)
				}
				b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkSgemmHalf measures the layer's projection x·Wᵀ (transB, W stored n×k) with W in
// float32 (Sgemm) and in bfloat16 and binary16 (SgemmHalf), on one goroutine per instruction
// set, reporting GFLOP/s (2·m·n·k per call) and the bytes of W read per second (n·k values of
// 4 or 2 bytes per call). With cache=hot every call reads the same W, which stays in L2 or L3;
// with cache=cold (m = 1, a decode step) the calls go round copies of W filling 256 MiB, so W
// comes from memory as a model's weights do, and read-bw is that rate's fraction of the
// one-thread read bandwidth (ReadBandwidth, measured once).
func BenchmarkSgemmHalf(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	var readBW float64 // one thread's read bandwidth, measured by the first cold benchmark
	for _, is := range available() {
		for _, nk := range []int{768, 2048} {
			n, k := nk, nk
			w32 := to32(randSlice(r, n*k))
			wbf, wf := make([]uint16, n*k), make([]uint16, n*k)
			EncodeBF16(wbf, w32)
			EncodeF16(wf, w32)
			for _, m := range []int{1, 16, 512} {
				a := to32(randSlice(r, m*k))
				c := make([]float32, m*n)
				caches := []string{"hot"}
				if m == 1 {
					caches = append(caches, "cold")
				}
				for _, cache := range caches {
					for _, format := range []string{"f32", "bf16", "f16"} {
						b.Run(fmt.Sprintf("isa=%v/m=%d/n=%d,k=%d/cache=%s/B=%s", is, m, n, k, cache, format), func(b *testing.B) {
							size := 2
							if format == "f32" {
								size = 4
							}
							copies := 1
							if cache == "cold" {
								copies = max(2, (256<<20)/(size*n*k))
								if readBW == 0 {
									readBW = ReadBandwidth(1, 0, 0)
								}
							}
							ring32, ring16 := make([][]float32, copies), make([][]uint16, copies)
							for i := range copies {
								if format == "f32" {
									ring32[i] = slices.Clone(w32)
								} else if format == "bf16" {
									ring16[i] = slices.Clone(wbf)
								} else {
									ring16[i] = slices.Clone(wf)
								}
							}
							var ws Workspace
							next := 0
							call := func() {
								switch format {
								case "f32":
									ws.sgemm(is, false, true, m, n, k, 1, a, k, ring32[next], k, 0, c, n, nil)
								default:
									ws.sgemmHalf(is, false, true, m, n, k, 1, a, k, ring16[next], format == "bf16", k, 0, c, n, nil)
								}
								next = (next + 1) % copies
							}
							for range copies {
								call()
							}
							b.ResetTimer()
							for b.Loop() {
								call()
							}
							sec := b.Elapsed().Seconds()
							bw := float64(size) * float64(n) * float64(k) * float64(b.N) / sec
							b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/sec/1e9, "GFLOP/s")
							b.ReportMetric(bw/1e9, "GB/s-of-B")
							if cache == "cold" {
								b.ReportMetric(bw/readBW, "read-bw")
							}
						})
					}
				}
			}
		}
	}
}

// BenchmarkGemmBF16 measures GemmBF16 beside Sgemm on one goroutine, alternating them, at the
// layer's projection x·Wᵀ (m = 2048 tokens, n = 3·768, k = 768, W stored [n, k]) and at
// m = n = k = 1024 (NT, NN and TN), reporting GFLOP/s (2·m·n·k per call), the rate of the median
// call (on a machine shared with other work the mean mixes in their time, as PeakGFLOPS's
// median chunk does not), and that median rate as a fraction of the one-thread float32 FMA
// peak (PeakGFLOPS) and, for GemmBF16, of the VDPBF16PS peak (peakBF16GFLOPS), both measured
// once. B is float32 (impl=f32: Sgemm, impl=bf16: GemmBF16) or bfloat16 (GemmBF16Half).
func BenchmarkGemmBF16(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	peak, peakBF16 := peakGFLOPS(best, 1, 0), peakBF16GFLOPS(1, 0)
	b.Logf("one thread: float32 FMA peak (%v) %.1f GFLOP/s, VDPBF16PS peak %.1f GFLOP/s", best, peak, peakBF16)
	for _, s := range []sgemmBench{
		{name: "shape=proj-T=2048/NT", m: 2048, n: 2304, k: 768, transB: true},
		{name: "shape=1024x1024x1024/NT", m: 1024, n: 1024, k: 1024, transB: true},
		{name: "shape=1024x1024x1024/NN", m: 1024, n: 1024, k: 1024},
		{name: "shape=1024x1024x1024/TN", m: 1024, n: 1024, k: 1024, transA: true},
	} {
		lda := s.k
		if s.transA {
			lda = s.m
		}
		br, bc := s.k, s.n
		if s.transB {
			br, bc = s.n, s.k
		}
		a := to32(randSlice(r, s.m*s.k))
		bm := to32(randSlice(r, br*bc))
		bh := make([]uint16, len(bm))
		EncodeBF16(bh, bm)
		c := make([]float32, s.m*s.n)
		for _, impl := range []string{"f32", "bf16", "bf16-Bbf16"} {
			b.Run(s.name+"/impl="+impl, func(b *testing.B) {
				var w Workspace
				call := func() {
					switch impl {
					case "f32":
						w.Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, bc, 0, c, s.n, nil)
					case "bf16":
						w.GemmBF16(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, bc, 0, c, s.n, nil)
					default:
						w.GemmBF16Half(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bh, true, bc, 0, c, s.n, nil)
					}
				}
				call()
				var calls []time.Duration
				b.ResetTimer()
				for b.Loop() {
					t0 := time.Now()
					call()
					calls = append(calls, time.Since(t0))
				}
				flop := 2 * float64(s.m) * float64(s.n) * float64(s.k)
				b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				slices.Sort(calls)
				g := flop / calls[len(calls)/2].Seconds() / 1e9
				b.ReportMetric(g, "median-GFLOP/s")
				b.ReportMetric(g/peak, "f32-peak")
				if peakBF16 > 0 && impl != "f32" {
					b.ReportMetric(g/peakBF16, "bf16-peak")
				}
			})
		}
	}
}

// BenchmarkGemmBF16Tile measures attention's S = Q·Kᵀ tile, 64 queries × 64 keys over a head
// of 128, on one goroutine, with Q's and K's rows inside the [T, 3E] rows of the projection
// (stride 2304): Sgemm on K read transposed (impl=f32-NT) and on Kᵀ stored [d, T] as the
// float32 attention keeps it (impl=f32-NN, stride 1024), GemmBF16 on the float32 tiles
// (impl=bf16), GemmBF16Bits on tiles converted to bfloat16 once (impl=bf16-bits). It reports
// GFLOP/s (2·m·n·k per call).
func BenchmarkGemmBF16Tile(b *testing.B) {
	const m, n, k, ld, ldKT = 64, 64, 128, 2304, 1024
	r := rand.New(rand.NewPCG(4, 4))
	q, kk := to32(randSlice(r, (m-1)*ld+k)), to32(randSlice(r, (n-1)*ld+k))
	kt := to32(randSlice(r, (k-1)*ldKT+n))
	qh, kh := make([]uint16, len(q)), make([]uint16, len(kk))
	EncodeBF16(qh, q)
	EncodeBF16(kh, kk)
	c := make([]float32, m*n)
	for _, impl := range []string{"f32-NT", "f32-NN", "bf16", "bf16-bits"} {
		b.Run("shape=attn-QK-64x64x128/impl="+impl, func(b *testing.B) {
			var w Workspace
			call := func() {
				switch impl {
				case "f32-NT":
					w.Sgemm(false, true, m, n, k, 1, q, ld, kk, ld, 0, c, n, nil)
				case "f32-NN":
					w.Sgemm(false, false, m, n, k, 1, q, ld, kt, ldKT, 0, c, n, nil)
				case "bf16":
					w.GemmBF16(false, true, m, n, k, 1, q, ld, kk, ld, 0, c, n, nil)
				default:
					w.GemmBF16Bits(false, true, m, n, k, 1, qh, ld, kh, ld, 0, c, n, nil)
				}
			}
			call()
			b.ResetTimer()
			for b.Loop() {
				call()
			}
			b.ReportMetric(2*m*n*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
