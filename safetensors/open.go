package safetensors

import (
	"fmt"
	"os"
)

// Open parses the file at path as ReadFile does, but maps it into memory instead of reading it
// (on Unix; elsewhere it reads it): the tensors' bytes come from the file as they are touched,
// and stay the page cache's, shared with other processes. Copy what you need (Float32, Half,
// …), call Release on the tensors copied to take their pages out of the process's resident
// memory, and Close the File when done. The file must not be truncated while it is open (on
// Unix, touching a page past its new end kills the process). Errors are ReadFile's.
func Open(path string) (*File, error) {
	size, err := statRegular(path)
	if err != nil {
		return nil, err
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close() // a mapping outlives its descriptor
	data, unmap, err := mapFile(fd, size)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	f, err := parse(data)
	if err != nil {
		if unmap != nil {
			_ = unmap(data) // the parse error is the one to report
		}
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	f.unmap = unmap
	return f, nil
}

// Release tells the File that the tensor called name will not be read again soon: on Linux, the
// pages of an Open File that lie wholly inside the tensor's bytes leave the process's resident
// memory (a later read brings them back from the file, so nothing changes but memory use).
// Elsewhere, and for a File of ReadFile or Parse, it does nothing. It returns an error when the
// File has no such tensor or is closed.
func (f *File) Release(name string) error {
	t, err := f.Raw(name)
	if err != nil {
		return err
	}
	if f.unmap == nil || len(t.Data) == 0 {
		return nil
	}
	begin := f.offs[name]
	page := os.Getpagesize()
	lo, hi := (begin+page-1)/page*page, (begin+len(t.Data))/page*page
	if lo >= hi {
		return nil
	}
	if err := release(f.data[lo:hi]); err != nil {
		return fmt.Errorf("safetensors: release %q: %w", name, err)
	}
	return nil
}

// Close releases the memory mapping of a File that Open mapped; afterwards Raw and the reading
// methods return errors (Names, Has and Metadata still work). Closing a File of ReadFile or
// Parse only marks it closed. It returns the system's error, if unmapping fails; a second Close
// does nothing.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	data := f.data
	f.data = nil
	for name, t := range f.tensors {
		t.Data = nil
		f.tensors[name] = t
	}
	if f.unmap == nil {
		return nil
	}
	if err := f.unmap(data); err != nil {
		return fmt.Errorf("safetensors: unmap: %w", err)
	}
	return nil
}
