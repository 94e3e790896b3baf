//go:build !purego

package kernel

import (
	"math/rand/v2"
	"testing"
)

// TestPackAT checks the packer of a transposed A's row panels against copy for every panel
// height and several lengths, with the panel's last value the source slice's last, and that
// nothing past the panel is written.
func TestPackAT(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, is := range available() {
		for mr := 1; mr <= 16; mr++ {
			for _, kc := range []int{1, 3, 4, 5, 8, 257} {
				for _, lda := range []int{mr, mr + 3, 2304} {
					off := r.IntN(5)
					a := to32(randSlice(r, off+(kc-1)*lda+mr))
					dst := make([]float32, kc*mr+16)
					for i := range dst {
						dst[i] = -7
					}
					packAT(is, dst, a, off, lda, kc, mr)
					for p := range kc {
						for i := range mr {
							if got, want := dst[p*mr+i], a[off+p*lda+i]; got != want {
								t.Fatalf("%v mr=%d kc=%d lda=%d: dst[%d] = %v, want %v", is, mr, kc, lda, p*mr+i, got, want)
							}
						}
					}
					for i := kc * mr; i < len(dst); i++ {
						if dst[i] != -7 {
							t.Fatalf("%v mr=%d kc=%d lda=%d: wrote dst[%d] past the panel", is, mr, kc, lda, i)
						}
					}
				}
			}
		}
	}
}
