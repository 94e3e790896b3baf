package lab

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/mhalab/mha/experiment"
)

// experimentSeed seeds the lab's experiment runs.
const experimentSeed = 1

// experiments runs each experiment at most once (Quick sizes, a fixed seed: the result is
// always the same) and keeps its result for the page and its pictures.
type experiments struct {
	mu   sync.Mutex
	runs map[string]*experimentRun // by name, one of experiment.Names()
}

// experimentRun is one experiment's result; mu is held while it runs, so that concurrent
// requests wait for one run instead of starting their own.
type experimentRun struct {
	mu  sync.Mutex
	res *experiment.Result
}

// result returns the result of experiment name, running it first if no request has.
func (e *experiments) result(ctx context.Context, name string, workers int) (*experiment.Result, error) {
	if !slices.Contains(experiment.Names(), name) {
		return nil, &httpError{http.StatusNotFound, fmt.Sprintf("unknown experiment %q; want one of %s", clip(name), strings.Join(experiment.Names(), ", "))}
	}
	e.mu.Lock()
	if e.runs == nil {
		e.runs = map[string]*experimentRun{}
	}
	run := e.runs[name]
	if run == nil {
		run = new(experimentRun)
		e.runs[name] = run
	}
	e.mu.Unlock()

	run.mu.Lock()
	defer run.mu.Unlock()
	if run.res != nil {
		return run.res, nil
	}
	res, err := experiment.Run(ctx, name, experiment.Config{Seed: experimentSeed, Workers: workers, Quick: true})
	if err != nil {
		return nil, err
	}
	run.res = res
	return res, nil
}

// experimentInfo names an experiment in /api/experiments.
type experimentInfo struct {
	Name string `json:"name"`
}

// listExperiments answers GET /api/experiments.
func (s *Server) listExperiments(w http.ResponseWriter, _ *http.Request) error {
	var out []experimentInfo
	for _, name := range experiment.Names() {
		out = append(out, experimentInfo{name})
	}
	return writeJSON(w, http.StatusOK, out)
}

// experimentResponse is the answer of /api/experiment/NAME.
type experimentResponse struct {
	Name    string           `json:"name"`
	Title   string           `json:"title"`
	Summary string           `json:"summary"`
	Table   experiment.Table `json:"table"`
	Figures []figureLinks    `json:"figures"`
}

// figureLinks are the addresses of one figure of a result.
type figureLinks struct {
	Name string `json:"name"`
	PNG  string `json:"png"`
	SVG  string `json:"svg"`
}

// experiment answers GET /api/experiment/NAME: the experiment's result, run at Quick sizes.
func (s *Server) experiment(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	res, err := s.exps.result(r.Context(), name, s.opt.Workers)
	if err != nil {
		return err
	}
	resp := &experimentResponse{Name: res.Name, Title: res.Title, Summary: res.Summary, Table: res.Table, Figures: []figureLinks{}}
	for _, f := range res.Pictures {
		base := "/api/experiment/" + url.PathEscape(name) + "/" + url.PathEscape(f.Name) + "?format="
		resp.Figures = append(resp.Figures, figureLinks{f.Name, base + "png", base + "svg"})
	}
	return writeJSON(w, http.StatusOK, resp)
}

// figure answers GET /api/experiment/NAME/FIGURE?format=png|svg: one picture of a result.
func (s *Server) figure(w http.ResponseWriter, r *http.Request) error {
	name, fig, format := r.PathValue("name"), r.PathValue("figure"), r.URL.Query().Get("format")
	if format != "png" && format != "svg" {
		return badRequest("format %q; want png or svg", clip(format))
	}
	res, err := s.exps.result(r.Context(), name, s.opt.Workers)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(res.Pictures, func(f experiment.Figure) bool { return f.Name == fig })
	if i < 0 {
		names := make([]string, len(res.Pictures))
		for j, f := range res.Pictures {
			names[j] = f.Name
		}
		return &httpError{http.StatusNotFound, fmt.Sprintf("experiment %s has no figure %q; want one of %s", name, clip(fig), strings.Join(names, ", "))}
	}
	return writePicture(w, res.Pictures[i].Picture, format, name+"-"+fig)
}
