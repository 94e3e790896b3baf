package lab

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/mhalab/mha/models"
)

//go:embed static
var static embed.FS

// Limits on requests.
const (
	// MaxBody is the largest request body read, in bytes; a larger one gets 413.
	MaxBody = 64 << 10
	// maxHeader bounds a request's header and URL, which carry a picture's parameters.
	maxHeader = 64 << 10
)

// Options configure a Server. The zero value serves with the defaults given for each field.
type Options struct {
	// BodyTimeout bounds how long a request may take to send its body, which the lab reads
	// whole before the request waits for a heavy-work slot; 0 means 10 s. A request whose body
	// is not all there by then gets 408.
	BodyTimeout time.Duration
	// Heavy bounds the requests that run a model, render a picture or run an experiment at
	// once; 0 means 2. A request that finds no free slot within Queue gets 503.
	Heavy int
	// Queue is how long a request waits for a slot; 0 means 5 s.
	Queue time.Duration
	// Timeout bounds the work of one request on a model or a picture; 0 means 30 s. A request
	// that runs past it gets 503.
	Timeout time.Duration
	// ExperimentTimeout bounds one experiment run; 0 means 5 min.
	ExperimentTimeout time.Duration
	// Workers bounds the goroutines of each forward pass; 0 means GOMAXPROCS.
	Workers int
	// Models are the paths of the user's models, shown after the shipped ones: Hugging Face
	// folders (GPT-2, BERT, Llama, Mistral, Qwen2) or checkpoints of mha train, opened with
	// pretrained.OpenPath. Each is named after its path's last element (see Server.Added).
	Models []string
}

// Server is the lab: the page embedded in the binary and the JSON API under /api/ (see the
// package documentation). It loads every model once, in New, and keeps it; requests on the same
// model take turns. A Server is safe for concurrent use.
type Server struct {
	opt    Options
	models map[string]*model
	names  []string      // models.Names(), sorted, then the user's models in the order given
	added  []string      // the user's models' names
	heavy  chan struct{} // one value per request running heavy work
	exps   experiments
	mux    *http.ServeMux
}

// New loads the shipped models and the user's (Options.Models) and returns a Server. It returns
// an error when a model does not load, naming its path, or an option is negative.
func New(opt Options) (*Server, error) {
	if opt.BodyTimeout < 0 || opt.Heavy < 0 || opt.Queue < 0 || opt.Timeout < 0 || opt.ExperimentTimeout < 0 || opt.Workers < 0 {
		return nil, fmt.Errorf("lab: options %+v, want every field ≥ 0 (0 for the default)", opt)
	}
	opt.BodyTimeout = orDefault(opt.BodyTimeout, 10*time.Second)
	opt.Heavy = orDefault(opt.Heavy, 2)
	opt.Queue = orDefault(opt.Queue, 5*time.Second)
	opt.Timeout = orDefault(opt.Timeout, 30*time.Second)
	opt.ExperimentTimeout = orDefault(opt.ExperimentTimeout, 5*time.Minute)
	opt.Workers = orDefault(opt.Workers, runtime.GOMAXPROCS(0))
	s := &Server{
		opt:    opt,
		models: map[string]*model{},
		names:  models.Names(),
		heavy:  make(chan struct{}, opt.Heavy),
	}
	for _, name := range s.names {
		m, err := loadModel(name)
		if err != nil {
			return nil, err
		}
		s.models[name] = m
	}
	taken := map[string]bool{}
	for _, name := range s.names {
		taken[name] = true
	}
	s.added = userNames(opt.Models, taken)
	for i, path := range opt.Models {
		m, err := loadUser(path, s.added[i])
		if err != nil {
			return nil, err
		}
		s.models[m.name] = m
		s.names = append(s.names, m.name)
	}
	s.routes()
	return s, nil
}

// Added returns the names the user's models (Options.Models) have in the lab, in their order.
func (s *Server) Added() []string {
	return slices.Clone(s.added)
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// ServeHTTP answers one request: the page and its files, or the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'")
	s.mux.ServeHTTP(w, r)
}

// Serve answers requests on ln until ctx is done, then stops taking new ones, lets the running
// ones finish for up to 5 s and returns nil. It returns the listener's error if it fails first.
// When ln listens on a loopback address, requests must name a loopback host (localhost,
// 127.0.0.1, [::1]) in their Host header, so that another site cannot reach the lab through DNS
// rebinding.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var h http.Handler = s
	if isLoopback(ln.Addr()) {
		h = loopbackOnly(s)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.opt.ExperimentTimeout + s.opt.Queue + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeader,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(stop); err != nil {
		srv.Close()
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// isLoopback reports whether addr is a TCP address on a loopback IP.
func isLoopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// loopbackOnly answers 421 to requests whose Host header names anything but a loopback host.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if ip := net.ParseIP(host); !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
			writeError(w, &httpError{http.StatusMisdirectedRequest,
				fmt.Sprintf("host %q is not this lab's; it listens on loopback only, open it as http://127.0.0.1:PORT/", clip(r.Host))})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// routes registers the page and the API.
func (s *Server) routes() {
	page, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded directory is always there
	}
	files := http.FileServerFS(page)
	s.mux = http.NewServeMux()
	s.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	s.mux.Handle("/api/", s.endpoint(endpoint{serve: notFound}))
	s.mux.Handle("/api/models", s.endpoint(endpoint{methods: []string{"GET"}, serve: s.listModels}))
	s.mux.Handle("/api/run", s.endpoint(endpoint{methods: []string{"POST"}, heavy: true, serve: s.run}))
	s.mux.Handle("/api/heads", s.endpoint(endpoint{methods: []string{"POST"}, heavy: true, serve: s.heads}))
	s.mux.Handle("/api/ablate", s.endpoint(endpoint{methods: []string{"POST"}, heavy: true, serve: s.ablate}))
	s.mux.Handle("/api/circuits", s.endpoint(endpoint{methods: []string{"POST"}, heavy: true, serve: s.circuitsAnswer}))
	s.mux.Handle("/api/composition", s.endpoint(endpoint{methods: []string{"GET"}, heavy: true, serve: s.compositionAnswer}))
	s.mux.Handle("/api/picture", s.endpoint(endpoint{methods: []string{"GET"}, heavy: true, serve: s.picture}))
	s.mux.Handle("/api/experiments", s.endpoint(endpoint{methods: []string{"GET"}, serve: s.listExperiments}))
	s.mux.Handle("/api/experiment/{name}", s.endpoint(endpoint{methods: []string{"GET"}, heavy: true, long: true, serve: s.experiment}))
	s.mux.Handle("/api/experiment/{name}/{figure}", s.endpoint(endpoint{methods: []string{"GET"}, heavy: true, long: true, serve: s.figure}))
}

// endpoint is one API route: the methods it takes (nil: any), whether it needs a heavy-work slot and the
// long (experiment) timeout, and the function that answers it. serve writes its response only
// when it succeeds; its error becomes a JSON error response.
type endpoint struct {
	methods     []string
	heavy, long bool
	serve       func(w http.ResponseWriter, r *http.Request) error
}

// endpoint wraps e with the checks of admit, the timeout and the heavy-work slot.
func (s *Server) endpoint(e endpoint) http.Handler {
	timeout := s.opt.Timeout
	if e.long {
		timeout = s.opt.ExperimentTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		body, err := s.admit(w, r, e.methods)
		if err != nil {
			writeError(w, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		r = r.WithContext(ctx)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if e.heavy {
			release, err := s.acquire(ctx)
			if err != nil {
				writeError(w, err)
				return
			}
			defer release()
		}
		if err := e.serve(w, r); err != nil {
			if ctx.Err() != nil {
				err = &httpError{http.StatusServiceUnavailable, fmt.Sprintf("the request took longer than %v and was stopped", timeout)}
			}
			writeError(w, err)
		}
	})
}

// admit checks what an API request can be refused for before it does any work, and returns its
// body: the method (405, with the methods allowed; HEAD wherever GET is), the Origin (403), the
// query (400), a POST's Content-Type (415), then the body, read whole (readBody). So a request
// that waits for a heavy-work slot has all of its body, and a page of another site cannot make
// the lab compute.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, methods []string) ([]byte, error) {
	// HEAD is GET without the body (RFC 9110 §9.3.2), which net/http drops.
	if methods != nil && !slices.Contains(methods, r.Method) && (r.Method != http.MethodHead || !slices.Contains(methods, http.MethodGet)) {
		allow := methods
		if slices.Contains(methods, http.MethodGet) {
			allow = append(slices.Clip(methods), http.MethodHead)
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return nil, &httpError{http.StatusMethodNotAllowed,
			fmt.Sprintf("%s %s: method not allowed, want %s", r.Method, r.URL.Path, strings.Join(methods, " or "))}
	}
	if err := checkOrigin(r); err != nil {
		return nil, err
	}
	if err := checkQuery(r.URL.RawQuery); err != nil {
		return nil, err
	}
	if r.Method == http.MethodPost {
		ct := r.Header.Get("Content-Type")
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, &httpError{http.StatusUnsupportedMediaType,
				fmt.Sprintf("POST %s with Content-Type %q; want application/json", r.URL.Path, clip(ct))}
		}
	}
	return s.readBody(w, r)
}

// checkOrigin refuses, with 403, a request whose Origin header names another site than the one
// it is sent to (scheme and Host): a browser sends one when a page of that site calls the API.
func checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if own := scheme + "://" + r.Host; !strings.EqualFold(origin, own) {
		return &httpError{http.StatusForbidden,
			fmt.Sprintf("request from origin %q; the lab answers only its own page, origin %s", clip(origin), clip(own))}
	}
	return nil
}

// checkQuery refuses, with 400, a query with a pair that url.ParseQuery cannot parse (a bad %
// escape, a semicolon), which r.URL.Query() would drop without a word, and one of more than
// maxQueryPairs pairs (past net/url's own limit, r.URL.Query() drops them all).
func checkQuery(raw string) error {
	if n := strings.Count(raw, "&") + 1; n > maxQueryPairs {
		return badRequest("query has %d pairs, want at most %d", n, maxQueryPairs)
	}
	for pair := range strings.SplitSeq(raw, "&") {
		if _, err := url.ParseQuery(pair); err != nil {
			return badRequest("query pair %q: %v; want NAME=VALUE pairs joined by &, with %% only in %%XX escapes", clip(pair), err)
		}
	}
	return nil
}

// maxQueryPairs bounds a query's NAME=VALUE pairs: no endpoint reads more than a few dozen.
const maxQueryPairs = 100

// readBody reads r's body whole, at most MaxBody bytes (then 413), within Options.BodyTimeout
// (then 408), so that a client that sends it slowly holds no heavy-work slot meanwhile.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	// A ResponseRecorder, in tests, has no connection to set a deadline on.
	if err := rc.SetReadDeadline(time.Now().Add(s.opt.BodyTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return nil, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if tooLong, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes; want at most that", tooLong.Limit)}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, &httpError{http.StatusRequestTimeout,
			fmt.Sprintf("the request body was still arriving after %v (%d bytes had come); want all of it within that time", s.opt.BodyTimeout, len(body))}
	}
	if err != nil {
		return nil, badRequest("reading the request body: %v", err)
	}
	// No deadline on reading once the body is here: the server's read that watches for the
	// client going away, under way from the start when there is no body, would hit it and cancel
	// the request's work.
	if err := rc.SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return nil, err
	}
	return body, nil
}

// acquire waits up to the queue time for a heavy-work slot and returns the function that frees
// it, or a 503 error.
func (s *Server) acquire(ctx context.Context) (release func(), err error) {
	wait := time.NewTimer(s.opt.Queue)
	defer wait.Stop()
	select {
	case s.heavy <- struct{}{}:
		return func() { <-s.heavy }, nil
	case <-wait.C:
	case <-ctx.Done():
	}
	return nil, &httpError{http.StatusServiceUnavailable,
		fmt.Sprintf("the lab is busy: %d requests are running and this one waited %v; try again", cap(s.heavy), s.opt.Queue)}
}

// notFound answers a path under /api/ that names no endpoint.
func notFound(_ http.ResponseWriter, r *http.Request) error {
	return &httpError{http.StatusNotFound, fmt.Sprintf("no API endpoint %s; want /api/models, /api/run, /api/heads, /api/ablate, /api/circuits, /api/composition, /api/picture, /api/experiments or /api/experiment/NAME", clip(r.URL.Path))}
}
