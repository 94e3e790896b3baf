package pretrained

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mhalab/mha/safetensors"
)

// maxJSON bounds the JSON files of a folder (config.json, the shard index) that are read whole.
const maxJSON = 64 << 20

// readJSON decodes the JSON file name of dir into v. The file must be a regular file of at most
// maxJSON bytes.
func readJSON(dir, name string, v any) error {
	data, err := readSmall(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("pretrained: %s is not the JSON expected: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// readSmall reads the regular file at path, of at most maxJSON bytes.
func readSmall(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("pretrained: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("pretrained: %s is not a regular file (mode %v)", path, info.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pretrained: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJSON+1))
	if err != nil {
		return nil, fmt.Errorf("pretrained: %w", err)
	}
	if len(data) > maxJSON {
		return nil, fmt.Errorf("pretrained: %s is larger than %d bytes", path, maxJSON)
	}
	return data, nil
}

// weights are the tensors of a folder: model.safetensors, or the shards that
// model.safetensors.index.json lists.
type weights struct {
	files map[string]*safetensors.File // by file name
	where map[string]string            // tensor name → file name
}

// openWeights opens (maps) the folder's safetensors files; close them when done. Every tensor
// name must be in one file only, and an index must name files of the folder itself (no paths).
// On error no file stays open.
func openWeights(dir string) (_ *weights, err error) {
	w := &weights{files: map[string]*safetensors.File{}, where: map[string]string{}}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err == nil {
		f, err := safetensors.Open(single)
		if err != nil {
			return nil, fmt.Errorf("pretrained: %w", err)
		}
		w.files["model.safetensors"] = f
		for _, n := range f.Names() {
			w.where[n] = "model.safetensors"
		}
		return w, nil
	}
	const indexName = "model.safetensors.index.json"
	if _, err := os.Stat(filepath.Join(dir, indexName)); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pretrained: %s has neither model.safetensors nor %s (only safetensors weights are read; convert .bin files with Hugging Face's tools)", dir, indexName)
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := readJSON(dir, indexName, &index); err != nil {
		return nil, err
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("pretrained: %s has no weight_map", filepath.Join(dir, indexName))
	}
	for _, name := range slices.Sorted(maps.Keys(index.WeightMap)) {
		file := index.WeightMap[name]
		if file == "" || file != filepath.Base(file) || strings.HasPrefix(file, ".") {
			return nil, fmt.Errorf("pretrained: %s maps %q to %q, want a file name in the folder", indexName, name, file)
		}
		if w.files[file] == nil {
			f, err := safetensors.Open(filepath.Join(dir, file))
			if err != nil {
				return nil, fmt.Errorf("pretrained: shard of %s: %w", indexName, err)
			}
			w.files[file] = f
		}
		if !w.files[file].Has(name) {
			return nil, fmt.Errorf("pretrained: %s maps %q to %s, which does not hold it", indexName, name, file)
		}
		w.where[name] = file
	}
	for file, f := range w.files {
		for _, n := range f.Names() {
			if other, ok := w.where[n]; ok && other != file {
				return nil, fmt.Errorf("pretrained: tensor %q is in %s and %s", n, other, file)
			}
			w.where[n] = file
		}
	}
	return w, nil
}

// close closes the files, releasing their mappings.
func (w *weights) close() {
	for _, f := range w.files {
		_ = f.Close() // only unmapping can fail, and the model holds copies
	}
}

// raw returns the stored tensor called name and its file.
func (w *weights) raw(name string) (safetensors.Tensor, string, bool) {
	file, ok := w.where[name]
	if !ok {
		return safetensors.Tensor{}, "", false
	}
	t, err := w.files[file].Raw(name)
	return t, file, err == nil
}
