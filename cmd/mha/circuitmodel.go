package main

import (
	"errors"

	"github.com/spf13/pflag"

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

// cleanIsText makes --clean another name for --text in fl, so that mha attribute and mha lens
// take mha patch's clean prompt as it is written there.
func cleanIsText(fl *pflag.FlagSet) {
	fl.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "clean" {
			name = "text"
		}
		return pflag.NormalizedName(name)
	})
}
