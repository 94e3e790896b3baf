package main

import (
	"errors"

	"github.com/mhalab/mha/lab"
)

// openCircuitModel opens --model's value for mha patch, attribute, lens and composition: a
// shipped model's name, or a Hugging Face folder or checkpoint of mha train (lab.Open).
func openCircuitModel(name string) (*lab.Model, error) {
	if name == "" {
		return nil, errors.New("--model is required: a shipped model's name (see 'mha lab') or a Hugging Face folder or checkpoint of mha train")
	}
	return lab.Open(name)
}
