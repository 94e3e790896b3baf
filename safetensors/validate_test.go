package safetensors

import (
	"encoding/binary"
	"strings"
	"testing"
)

// withLength returns a file whose length prefix claims n header bytes, followed by rest.
func withLength(n uint64, rest string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
}

// entry1 is a valid header entry for a 2-element F32 tensor at [0, 8).
const entry1 = `"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`

// TestParseErrors gives Parse one broken file per validation rule and checks the error's text.
func TestParseErrors(t *testing.T) {
	data8 := make([]byte, 8)
	for _, tc := range []struct {
		name   string
		file   []byte
		phrase string
	}{
		// Length prefix.
		{"empty file", nil, "file is 0 bytes, want at least 8"},
		{"short file", []byte{1, 2, 3}, "file is 3 bytes, want at least 8"},
		{"length beyond data", withLength(100, "{}"), "header length 100 exceeds the 2 bytes after the length prefix"},
		{"length above max", withLength(MaxHeaderSize+1, "{}"), "exceeds the maximum 104857600 (MaxHeaderSize)"},
		{"length 2^64-1", withLength(1<<64-1, "{}"), "(MaxHeaderSize)"},

		// Header text and JSON structure.
		{"empty header", build("", nil), "header is empty"},
		{"bad utf8", build("{\"\xff\":1}", nil), "header is not valid UTF-8"},
		{"not an object", build(`[1,2]`, nil), `header starts with '[', want '{'`},
		{"leading space", build(` {}`, nil), `header starts with ' ', want '{'`},
		{"truncated JSON", build(`{"a":{"dtype":"F32"`, nil), "header is not valid JSON"},
		{"missing colon", build(`{"a" {}}`, nil), "header is not valid JSON"},
		{"non-string key", build(`{1:2}`, nil), "header is not valid JSON"},
		{"bad escape", build(`{"\q":{}}`, nil), "header is not valid JSON"},
		{"trailing garbage", build(`{} x`, nil), "trailing data after the JSON object"},
		{"two objects", build(`{}{}`, nil), "trailing data after the JSON object"},
		{"duplicate tensor", build(`{`+entry1+`,`+entry1+`}`, data8), `header has duplicate key "a"`},
		{"duplicate metadata", build(`{"__metadata__":{},"__metadata__":{}}`, nil), `header has duplicate key "__metadata__"`},
		{"entry not object", build(`{"a":[1]}`, nil), `tensor "a": entry is an array, want an object`},
		{"entry null", build(`{"a":null}`, nil), `tensor "a": entry is null, want an object`},
		{"unknown field", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}}`, data8), `tensor "a": unknown field "extra"`},
		{"duplicate field", build(`{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, data8), `tensor "a": duplicate field "dtype"`},
		{"empty name", build(`{"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, data8), "tensor with an empty name"},

		// __metadata__.
		{"metadata string", build(`{"__metadata__":"pt"}`, nil), `__metadata__ is the string "pt", want an object of strings`},
		{"metadata array", build(`{"__metadata__":[]}`, nil), `__metadata__ is an array, want an object of strings`},
		{"metadata number value", build(`{"__metadata__":{"k":1}}`, nil), `__metadata__["k"] is the number 1, want a string`},
		{"metadata object value", build(`{"__metadata__":{"k":{}}}`, nil), `__metadata__["k"] is an object, want a string`},
		{"metadata null value", build(`{"__metadata__":{"k":null}}`, nil), `__metadata__["k"] is null, want a string`},
		{"metadata duplicate key", build(`{"__metadata__":{"k":"a","k":"b"}}`, nil), `__metadata__ has duplicate key "k"`},

		// dtype.
		{"missing dtype", build(`{"a":{"shape":[2],"data_offsets":[0,8]}}`, data8), `tensor "a": missing field dtype`},
		{"unknown dtype", build(`{"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}`, data8[:2]), `tensor "a": unknown dtype "F8_E4M3"`},
		{"lowercase dtype", build(`{"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}`, data8), `unknown dtype "f32"`},
		{"dtype not string", build(`{"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}`, data8), `tensor "a": dtype is the number 4, want a string`},

		// shape.
		{"missing shape", build(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, data8), `tensor "a": missing field shape`},
		{"shape not array", build(`{"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}}`, data8), `tensor "a": shape is the number 2, want an array of integers`},
		{"shape null", build(`{"a":{"dtype":"F32","shape":null,"data_offsets":[0,8]}}`, data8), `shape is null, want an array of integers`},
		{"shape string element", build(`{"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}`, data8), `shape element 0 is the string "2", want an integer`},
		{"shape nested", build(`{"a":{"dtype":"F32","shape":[[[[2]]]],"data_offsets":[0,8]}}`, data8), `shape element 0 is an array, want an integer`},
		{"negative dim", build(`{"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}}`, data8), `tensor "a": shape [2 -1] has negative dimension -1`},
		{"shape overflow", build(`{"a":{"dtype":"F32","shape":[1073741824,1073741824,1073741824],"data_offsets":[0,8]}}`, data8), `has more than 1099511627776 elements`},
		{"shape overflow int64 product", build(`{"a":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}`, nil), `has more than 1099511627776 elements`},
		{"syntax error in shape", build(`{"a":{"dtype":"F32","shape":[2,],"data_offsets":[0,8]}}`, data8), `safetensors: header is not valid JSON: invalid character ']' looking for beginning of value (at byte 31 of the header)`},
		{"deeply nested shape", build(`{"a":{"dtype":"F32","shape":[`+strings.Repeat("[", 1<<20), nil), `shape element 0 is an array, want an integer`},
		{"deeply nested entry", build(`{"a":`+strings.Repeat("[", 1<<20), nil), `tensor "a": entry is an array`},
		{"fractional dim", build(`{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}`, data8), `shape element 0 is 2.0, want an integer`},
		{"exponent dim", build(`{"a":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}}`, data8), `shape element 0 is 2e0, want an integer`},
		{"dim beyond int64", build(`{"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}}`, data8), `shape element 0 is 9223372036854775808, which does not fit in int64`},

		// data_offsets.
		{"missing offsets", build(`{"a":{"dtype":"F32","shape":[2]}}`, data8), `tensor "a": missing field data_offsets`},
		{"one offset", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}`, data8), `data_offsets has 1 values, want 2`},
		{"three offsets", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}}`, data8), `data_offsets has more than 2 values, want 2`},
		{"offsets not array", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}}`, data8), `data_offsets is the string "0-8", want an array of integers`},
		{"negative offset", build(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[-8,-8]}}`, data8), `data_offsets [-8, -8] are negative`},
		{"begin after end", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, data8), `data_offsets [8, 0] have begin > end`},
		{"end beyond buffer", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, data8[:4]), `data_offsets end 8 is beyond the 4-byte data buffer`},
		{"huge end", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,9223372036854775807]}}`, data8), `end 9223372036854775807 is beyond the 8-byte data buffer`},
		{"fractional offset", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.5]}}`, data8), `data_offsets element 1 is 8.5, want an integer`},
		{"offset beyond int64", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,-9223372036854775809]}}`, data8), `element 1 is -9223372036854775809, which does not fit in int64`},

		// Byte count against dtype and shape.
		{"size mismatch", build(`{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}`, make([]byte, 12)), `safetensors: tensor "w": data is 12 bytes, want 16 (F32 × [2 2])`},
		{"size mismatch bf16", build(`{"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}}`, data8), `tensor "w": data is 8 bytes, want 6 (BF16 × [3])`},

		// Tiling of the data buffer.
		{"gap at start", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data8), `tensor "a" begins at byte 4, want 0: gap of 4 bytes at the start`},
		{"gap between", build(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}`, make([]byte, 6)), `tensor "b" begins at byte 4, want 2: gap of 2 bytes after tensor "a"`},
		{"overlap", build(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, make([]byte, 6)), `tensor "b" begins at byte 2, want 4: overlap with tensor "a"`},
		{"same range twice", build(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 4)), `overlap with tensor "a"`},
		{"empty tensor inside another", build(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}}`, make([]byte, 4)), `tensor "z" begins at byte 2, want 4: overlap with tensor "a"`},
		{"trailing bytes", build(`{`+entry1+`}`, make([]byte, 12)), `data buffer is 12 bytes but the tensors cover only 8: 4 trailing bytes`},
		{"no tensors but data", build(`{}`, []byte{0}), `data buffer is 1 bytes but the tensors cover only 0`},
	} {
		f, err := Parse(tc.file)
		if err == nil {
			t.Errorf("%s: Parse succeeded with names %v, want an error containing %q", tc.name, f.Names(), tc.phrase)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.phrase) || !strings.HasPrefix(msg, "safetensors: ") {
			t.Errorf("%s: Parse error = %q, want one starting with \"safetensors: \" and containing %q", tc.name, msg, tc.phrase)
		}
	}
}

// TestParseZeroSizeTensors checks that zero-size tensors may sit at any tensor boundary,
// including the very start and end of the buffer and alongside each other.
func TestParseZeroSizeTensors(t *testing.T) {
	header := `{"e0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},` +
		`"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},` +
		`"e1":{"dtype":"I64","shape":[3,0],"data_offsets":[2,2]},` +
		`"e2":{"dtype":"BOOL","shape":[0],"data_offsets":[2,2]},` +
		`"b":{"dtype":"U8","shape":[],"data_offsets":[2,3]},` +
		`"e3":{"dtype":"F16","shape":[0,0],"data_offsets":[3,3]}}`
	f := mustParse(t, build(header, []byte{1, 2, 3}))
	if got := strings.Join(f.Names(), ","); got != "a,b,e0,e1,e2,e3" {
		t.Errorf("Names() = %s", got)
	}
	e1, err := f.Float32("e1")
	if err != nil || len(e1.Data) != 0 || len(e1.Shape) != 2 || e1.Shape[0] != 3 {
		t.Errorf("e1 = %v, %v", e1, err)
	}
	// A file of only zero-size tensors has an empty buffer.
	mustParse(t, build(`{"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`, nil))
}
