package safetensors_test

import (
	"encoding/binary"
	"fmt"
	"log"
	"strings"

	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

func ExampleEncode() {
	w := &tensor.Tensor{Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}}
	mask := &tensor.Bool{Shape: []int{2}, Data: []bool{true, false}}
	data, err := safetensors.Encode(map[string]safetensors.Tensor{
		"w":    safetensors.FromFloat32(w),
		"mask": safetensors.FromBool(mask),
	}, map[string]string{"format": "pt"})
	if err != nil {
		log.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data) // header length, padded to a multiple of 8
	fmt.Printf("%d bytes: 8 + %d header + %d data\n", len(data), n, len(data)-8-int(n))
	header := string(data[8 : 8+n])
	fmt.Println(strings.TrimRight(header, " "))
	fmt.Println(len(header)-len(strings.TrimRight(header, " ")), "spaces of padding")
	fmt.Println(data[8+n:])
	// Output:
	// 178 bytes: 8 + 152 header + 18 data
	// {"__metadata__":{"format":"pt"},"mask":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[2,18]}}
	// 7 spaces of padding
	// [1 0 0 0 128 63 0 0 0 64 0 0 64 64 0 0 128 64]
}

func ExampleParse() {
	// A file as Python's safetensors writes it: length, JSON header, data.
	header := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}`
	data := []byte{byte(len(header)), 0, 0, 0, 0, 0, 0, 0}
	data = append(data, header...)
	data = append(data, 0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x40, 0xc0) // 1.5, -3

	f, err := safetensors.Parse(data)
	if err != nil {
		log.Fatal(err)
	}
	a, err := f.Float32("a")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(f.Names(), f.Metadata["format"], a.Shape, a.Data)
	_, err = f.Raw("b")
	fmt.Println(err)
	// Output:
	// [a] pt [2] [1.5 -3]
	// safetensors: no tensor "b" (have: a)
}

func ExampleFile_Half() {
	// A bfloat16 weight, written and read back as stored: 2 bytes a value, no conversion.
	w := &tensor.Half{Shape: []int{2, 2}, Data: []uint16{0x3f80, 0xc000, 0x3f00, 0x0000}, Format: tensor.BFloat16} // 1, -2, 0.5, 0
	data, err := safetensors.Encode(map[string]safetensors.Tensor{"w": safetensors.FromHalf(w)}, nil)
	if err != nil {
		log.Fatal(err)
	}
	f, err := safetensors.Parse(data)
	if err != nil {
		log.Fatal(err)
	}
	h, err := f.Half("w")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%v %v %#04x\n", h.Format, h.Shape, h.Data)
	x, err := f.Float32("w") // the same values, converted
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(x.Data)
	// Output:
	// bfloat16 [2 2] [0x3f80 0xc000 0x3f00 0x0000]
	// [1 -2 0.5 0]
}
