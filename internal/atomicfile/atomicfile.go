// Package atomicfile writes a file so that a reader sees the old content or the new, never a
// part: Write writes to a temporary file in the same directory, syncs it and renames it over the
// file's name. Every output file mha writes goes through it.
//
// Write replaces only a regular file, or creates a new one. A directory, a device (/dev/null,
// /dev/full), a named pipe (FIFO) or a socket at the name is refused with an error saying what it
// is, and left as it was: a rename would replace it with a regular file, and writing into it
// instead would lose the data or, for a FIFO without a reader, block for ever.
//
// A symbolic link is followed, as editors do: Write replaces the regular file at the end of the
// link (or creates it there, when the link dangles) and the link stays a link. A replaced file
// keeps its permission bits; a new file gets 0644 less the umask. Since the new content is a new
// file, a replaced file's owner becomes the user that writes it, and another hard link to it
// keeps the old content.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// maxLinks is how many symbolic links Write follows from one name, as many as Linux does.
const maxLinks = 40

// Write writes data to the file path atomically, as the package documentation describes. Its
// errors start with path. On every error, what was at path is left as it was and no temporary
// file remains.
func Write(path string, data []byte) error {
	target, old, err := resolve(path)
	if err != nil {
		return err
	}
	perm := fs.FileMode(0o644)
	if old != nil {
		perm = old.Mode().Perm()
	}
	dir, base := filepath.Split(target)
	tmp, err := createTemp(dir, base, perm)
	if err != nil {
		return fmt.Errorf("%s: cannot create a file in %s: %w", path, filepath.Dir(target), cause(err))
	}
	fail := func(op string, err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("%s: %s: %w", path, op, cause(err))
	}
	if _, err := tmp.Write(data); err != nil {
		return fail("write", err)
	}
	if old != nil {
		// The umask may have taken bits off the mode the file was created with.
		if err := tmp.Chmod(perm); err != nil {
			return fail("keep its mode "+perm.String(), err)
		}
	}
	if err := tmp.Sync(); err != nil {
		return fail("sync", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("%s: close: %w", path, cause(err))
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("%s: rename: %w", path, cause(err))
	}
	return nil
}

// Check returns the error Write would return now for what is at path: a directory, a device, a
// named pipe or a socket, at path or at the end of its symbolic links; too many links; or an error
// looking a name up, such as permission denied. It returns nil when path names a regular file or
// nothing, and does not check that path's directory exists and can be written.
func Check(path string) error {
	_, _, err := resolve(path)
	return err
}

// resolve follows path's symbolic links to the name Write replaces, and returns that name and,
// when a file is there, its FileInfo. It returns an error when the name holds anything but a
// regular file.
func resolve(path string) (string, fs.FileInfo, error) {
	target := path
	for range maxLinks + 1 {
		info, err := os.Lstat(target)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			// Nothing there; when the directory is missing or not one, creating the
			// temporary file says so.
			return target, nil, nil
		case err != nil:
			return "", nil, fmt.Errorf("%s: %w", path, cause(err))
		case info.Mode().IsRegular():
			return target, info, nil
		case info.Mode()&fs.ModeSymlink == 0:
			name := path
			if target != path {
				name = fmt.Sprintf("%s (a link to %s)", path, target)
			}
			return "", nil, fmt.Errorf("%s is %s, want a file name (a regular file to replace, or a new one)", name, kind(info.Mode()))
		}
		link, err := os.Readlink(target)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", path, cause(err))
		}
		if !filepath.IsAbs(link) {
			// Not filepath.Join, whose lexical cleaning of ".." is wrong when the link's
			// directory is itself reached through a link: the kernel resolves the name.
			dir, _ := filepath.Split(target)
			link = dir + link
		}
		target = link
	}
	return "", nil, fmt.Errorf("%s: more than %d symbolic links to follow, want at most %d", path, maxLinks, maxLinks)
}

// kind says what a file of mode m that is neither regular nor a symbolic link is.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "not a regular file (mode " + m.Type().String() + ")"
}

// createTemp creates a new file in dir (a directory name ending in a separator, or "" for the
// working directory) named after base, with mode perm less the umask, as os.CreateTemp does but
// with perm where os.CreateTemp always uses 0600.
func createTemp(dir, base string, perm fs.FileMode) (*os.File, error) {
	var err error
	for range 100 {
		name := dir + "." + base + ".tmp" + strconv.FormatUint(rand.Uint64(), 36)
		var f *os.File
		if f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm); !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, err
}

// cause returns err without the file name and operation of an *fs.PathError or *os.LinkError,
// which name the temporary file, not the one the caller asked for.
func cause(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	if le, ok := errors.AsType[*os.LinkError](err); ok {
		return le.Err
	}
	return err
}
