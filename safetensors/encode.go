package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/mhalab/mha/internal/atomicfile"
	"github.com/mhalab/mha/tensor"
)

// Encode returns the .safetensors bytes for the given tensors and metadata. The header lists
// "__metadata__" first (omitted when metadata is empty) and then the tensors in sorted-name
// order, whose data is laid out in the same order; the header is padded with spaces so that its
// length, and so the start of the data, is a multiple of 8.
//
// Encode returns an error when a name is empty, is "__metadata__" or is not valid UTF-8; when a
// tensor's dtype is unknown, its shape has a negative dimension or more than tensor.MaxElements
// elements, or len(Data) differs from the dtype's size times the number of elements; when a
// metadata key or value is not valid UTF-8; or when the header would exceed MaxHeaderSize.
func Encode(tensors map[string]Tensor, metadata map[string]string) ([]byte, error) {
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		names = append(names, name)
	}
	slices.Sort(names)

	var h bytes.Buffer
	h.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, fmt.Errorf("safetensors: metadata %q: key or value is not valid UTF-8", k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		writeString(&h, metadataKey)
		h.WriteString(":{")
		for i, k := range keys {
			if i > 0 {
				h.WriteByte(',')
			}
			writeString(&h, k)
			h.WriteByte(':')
			writeString(&h, metadata[k])
		}
		h.WriteByte('}')
	}

	var offset int64
	for i, name := range names {
		t := tensors[name]
		switch {
		case name == "":
			return nil, errors.New("safetensors: tensor name is empty")
		case name == metadataKey:
			return nil, fmt.Errorf("safetensors: tensor name %q is reserved for metadata", name)
		case !utf8.ValidString(name):
			return nil, fmt.Errorf("safetensors: tensor name %q is not valid UTF-8", name)
		}
		size := t.DType.Size()
		if size == 0 {
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q, want one of F32, F64, F16, BF16, BOOL, U8, I32, I64", name, t.DType)
		}
		n, err := tensor.NumElements(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: invalid shape %v: %w", name, t.Shape, err)
		}
		if want := n * size; len(t.Data) != want {
			return nil, fmt.Errorf("safetensors: tensor %q: data is %d bytes, want %d (%s × %v)", name, len(t.Data), want, t.DType, t.Shape)
		}
		if i > 0 || len(metadata) > 0 {
			h.WriteByte(',')
		}
		writeString(&h, name)
		h.WriteString(`:{"dtype":`)
		writeString(&h, string(t.DType))
		h.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			h.WriteString(strconv.Itoa(d))
		}
		end := offset + int64(len(t.Data))
		fmt.Fprintf(&h, `],"data_offsets":[%d,%d]}`, offset, end)
		offset = end
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	if h.Len() > MaxHeaderSize {
		return nil, fmt.Errorf("safetensors: header is %d bytes, more than the maximum %d (MaxHeaderSize)", h.Len(), MaxHeaderSize)
	}

	out := make([]byte, 8, 8+int64(h.Len())+offset)
	binary.LittleEndian.PutUint64(out, uint64(h.Len()))
	out = append(out, h.Bytes()...)
	for _, name := range names {
		out = append(out, tensors[name].Data...)
	}
	return out, nil
}

// writeString writes s as a JSON string, leaving <, > and & unescaped as other writers do.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // cannot fail for a string
	b.Truncate(b.Len() - 1) // Encode appends a newline
}

// WriteFile encodes the tensors and metadata with Encode and writes the result to path,
// atomically: through a temporary file in the same directory, synced and renamed over path, so
// that path never holds a partial file. It replaces only a regular file, keeping its permission
// bits, or creates one with 0644 less the umask; a directory, device, named pipe (FIFO) or socket
// at path is an error and is left as it is. A symbolic link is followed and the file at its end
// written, so that the link stays. It returns Encode's errors and any I/O error, naming the path;
// on an error nothing at path has changed and no temporary file remains.
func WriteFile(path string, tensors map[string]Tensor, metadata map[string]string) error {
	data, err := Encode(tensors, metadata)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, data); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
