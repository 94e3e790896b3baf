// Package models holds the small trained checkpoints that ship with mha, one per task of package
// tasks. They are the lab's defaults and what `mha eval --task NAME` reads when it is given no
// checkpoint. Each file's metadata holds the `mha train` command that reproduces it bit for bit
// (same seed, same worker count); README.md lists them with their scores.
package models

import (
	"embed"
	"fmt"
	"slices"
	"strings"

	"github.com/mhalab/mha/nn"
)

//go:embed *.safetensors
var files embed.FS

// Names returns the tasks that have a shipped model, sorted.
func Names() []string {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic(err) // the embedded directory is always readable
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".safetensors"))
	}
	slices.Sort(names)
	return names
}

// Open returns the shipped model for task and its checkpoint metadata (the training command,
// config and step count). It returns an error when no model ships for task.
func Open(task string) (*nn.Model, map[string]string, error) {
	data, err := files.ReadFile(task + ".safetensors")
	if err != nil {
		return nil, nil, fmt.Errorf("models: no shipped model for task %q, want one of %s", task, strings.Join(Names(), ", "))
	}
	m, meta, _, err := nn.Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("models: %s: %w", task, err)
	}
	return m, meta, nil
}
