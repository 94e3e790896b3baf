package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/mhalab/mha/jsonnum"
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

// decode reads the request body, one JSON object, into v, whose fields are the only ones
// allowed. Its errors are 400 and say what was wrong.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
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
	return nil
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
