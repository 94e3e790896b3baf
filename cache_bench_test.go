package mha

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
)

// BenchmarkDecode times one decode step, a new token against a cache of L tokens (Hq = 32,
// Hkv = 8, D = Dv = 128, B = 1), on all cores, for each cache type. It reports read-GB/s, the
// cache bytes one step must read (L·Hkv·(D + Dv) values) over its time, and of-read-bw, that
// rate as a fraction of kernel.ReadBandwidth on as many threads as the steps run on
// (GOMAXPROCS, which -cpu sets), measured once per run of BenchmarkDecode, so once per -cpu
// value: the ceiling mha bench --decode --threads N compares against.
func BenchmarkDecode(b *testing.B) {
	const hq, hkv, d = 32, 8, 128
	bw := kernel.ReadBandwidth(runtime.GOMAXPROCS(0), 0, 0)
	for _, l := range []int{4096, 32768} {
		for _, dtype := range []CacheDType{CacheFloat32, CacheBFloat16, CacheFloat16} {
			b.Run(fmt.Sprintf("L=%d/%v", l, dtype), func(b *testing.B) {
				kv, err := NewKVCache(1, hkv, d, d, l+1, dtype)
				if err != nil {
					b.Fatal(err)
				}
				ctx := NewSDPAContext()
				var r SDPAResult
				if err := ctx.AttendCache(&r, kv, sdpaRand(1, 1, 1, hq, 0, d), sdpaRand(2, 1, 1, hkv, l-1, d), sdpaRand(3, 1, 1, hkv, l-1, d), nil); err != nil {
					b.Fatal(err)
				}
				q, k, v := sdpaRand(4, 1, 1, hq, 1, d), sdpaRand(5, 1, 1, hkv, 1, d), sdpaRand(6, 1, 1, hkv, 1, d)
				opt := SDPAOptions{Causal: CausalBottomRight}
				b.ResetTimer()
				for range b.N {
					if err := ctx.AttendCache(&r, kv, q, k, v, &opt); err != nil {
						b.Fatal(err)
					}
					kv.n-- // take the token back, so every step reads L tokens
				}
				bytes := float64(l) * hkv * 2 * d * float64(dtype.Size())
				rate := bytes * float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(rate/1e9, "read-GB/s")
				b.ReportMetric(rate/bw, "of-read-bw")
			})
		}
	}
}
