//go:build !unix

package safetensors

import (
	"io"
	"os"
)

// mapFile reads the size bytes of fd, where there is no mmap; there is nothing to unmap.
func mapFile(fd *os.File, size int64) ([]byte, func([]byte) error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(fd, data); err != nil {
		return nil, nil, err
	}
	return data, nil, nil
}
