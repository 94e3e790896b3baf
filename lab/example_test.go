package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/mhalab/mha/lab"
)

// Example serves the lab's API in-process: the shipped models, then a picture of one induction
// head on a sequence its task draws, as GET /api/picture gives it (Server.Picture, without
// HTTP). `mha lab` serves the same Server on a port, with the page.
func Example() {
	s, err := lab.New(lab.Options{})
	if err != nil {
		log.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/models", nil))
	var models []struct {
		Name   string `json:"name"`
		Layers int    `json:"layers"`
		Heads  int    `json:"heads"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &models); err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Code)
	for _, m := range models {
		fmt.Printf("%-10s layers %d, heads %d\n", m.Name, m.Layers, m.Heads)
	}
	q := url.Values{"model": {"induction"}, "seed": {"3"}, "kind": {"head"}, "layer": {"1"}, "head": {"2"}, "format": {"png"}}
	_, name, err := s.Picture(context.Background(), q)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(name)
	// Output:
	// 200
	// brackets   layers 2, heads 4
	// induction  layers 2, heads 4
	// modadd     layers 1, heads 4
	// prev-token layers 1, heads 4
	// sort       layers 2, heads 4
	// induction-L1H2
}
