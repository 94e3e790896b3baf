package lab

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/probe"
)

// httpError is an error with the HTTP status it answers with. Its message goes to the client.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// badRequest returns a 400 error with the formatted message.
func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// writeError answers {"error": message} with err's status: an httpError's own, 500 for any
// other error (a bug, never the user's input).
func writeError(w http.ResponseWriter, err error) {
	status, msg := http.StatusInternalServerError, "internal error: "+err.Error()
	if e, ok := errors.AsType[*httpError](err); ok {
		status, msg = e.status, e.msg
	}
	writeJSON(w, status, struct {
		Error string `json:"error"`
	}{msg})
}

// writeJSON answers v as JSON with the status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, err := w.Write(buf.Bytes())
	return err
}

// decode reads the request body, one JSON object of UTF-8 text, into v, whose fields are the
// only ones allowed, each spelled exactly as v names it and given once (encoding/json alone
// would take "Seed" for "seed", keep the last of a field given twice, and replace bytes that are
// not UTF-8). Its errors are 400 and say what was wrong.
func decode(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return badRequest("reading the request body: %v", err)
	}
	if !utf8.Valid(body) {
		return badRequest("request body is not UTF-8 text; want a JSON object in UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, v)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return badRequest("request body holds more than one JSON value; want one object")
		}
		return jsonError(err, v)
	}
	return checkKeys(json.NewDecoder(bytes.NewReader(body)), reflect.TypeOf(v), "")
}

// requiredFields lists, for the types whose every field a request must give, those fields:
// an ablation without its layer would otherwise ablate layer 0.
var requiredFields = map[reflect.Type][]string{
	reflect.TypeFor[probe.Ablation](): {"layer", "head", "mode"},
}

// checkKeys walks the JSON value at dec, valid JSON that decodes into type t, and returns a 400
// error for an object key that is not spelled exactly as one of t's fields, a key given twice,
// or a field of requiredFields left out. path names the value, for the error.
func checkKeys(dec *json.Decoder, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		var skip json.RawMessage // the type reads its own JSON
		return dec.Decode(&skip)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('['):
		elem := t
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := checkKeys(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case json.Delim('{'):
		var fields map[string]reflect.Type // a struct's fields by their JSON names
		if t.Kind() == reflect.Struct {
			fields = jsonFieldTypes(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key := tok.(string) // an object's keys are strings in valid JSON
			name := path + "." + key
			if path == "" {
				name = key
			}
			if seen[key] {
				return badRequest("field %q is given twice; want it once", clip(name))
			}
			seen[key] = true
			elem := t
			switch {
			case fields != nil:
				if elem = fields[key]; elem == nil {
					return badRequest("unknown field %q; want only %s (spelled so)", clip(name), strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
				}
			case t.Kind() == reflect.Map:
				elem = t.Elem()
			}
			if err := checkKeys(dec, elem, name); err != nil {
				return err
			}
		}
		for _, f := range requiredFields[t] {
			if !seen[f] {
				return badRequest("%s has no field %q; want %s", cmp.Or(path, "the request"), f, strings.Join(requiredFields[t], ", "))
			}
		}
	default:
		return nil // a scalar: nothing to close
	}
	_, err = dec.Token() // the closing ] or }
	return err
}

// jsonFieldTypes returns the types of the fields of struct type t by their JSON names, with
// those of its embedded structs in place.
func jsonFieldTypes(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && name == "":
			maps.Copy(out, jsonFieldTypes(f.Type))
		case name != "" && name != "-":
			out[name] = f.Type
		}
	}
	return out
}

// jsonError turns a decoding error into a request error.
func jsonError(err error, v any) error {
	if syntax, ok := errors.AsType[*json.SyntaxError](err); ok {
		return badRequest("request body is not valid JSON: %v (at byte %d)", err, syntax.Offset)
	}
	if typ, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if typ.Field == "" {
			return badRequest("request body is a JSON %s; want an object with the fields %s", typ.Value, fieldList(v))
		}
		return badRequest("field %q is a JSON %s; want %s", typ.Field, typ.Value, kind(typ.Type))
	}
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("request body is empty; want a JSON object with the fields %s", fieldList(v))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("request body ends in the middle of its JSON value")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("unknown field %s; want only %s", strings.TrimPrefix(err.Error(), "json: unknown field "), fieldList(v))
	}
	return badRequest("request body: %v", err)
}

// kind names what a JSON value must be to decode into a Go value of type t.
func kind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return kind(t.Elem())
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number ≥ 0"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return "an object"
}

// fieldList lists the JSON field names of the struct v points to, in their declared order.
func fieldList(v any) string {
	return strings.Join(jsonFields(reflect.TypeOf(v)), ", ")
}

// jsonFields returns the JSON field names of struct type t (or a pointer to it), with those of
// its embedded structs in place.
func jsonFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && name == "":
			names = append(names, jsonFields(f.Type)...)
		case name != "" && name != "-":
			names = append(names, name)
		}
	}
	return names
}

// number is the lab's name for jsonnum.Number: a float64 that encodes as JSON null when it is NaN
// or infinite (a measure that is undefined), which encoding/json would refuse.
type number = jsonnum.Number
