package jobspecs

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	slashpath "path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar"
	"github.com/hashicorp/go-cty-funcs/filesystem"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// fsFunctions are Nomad's file-system functions, offered only when a
// jobspec is parsed from a file on the machine that runs the CLI (dir is
// the jobspec's directory): the servers must not read their own files.
// Relative paths are relative to dir; "~" is the user's home, as in
// Nomad. Every one is bounded by b like the others.
func (b *budget) fsFunctions(dir string) map[string]function.Function {
	lim := int64(b.lim.MaxStringBytes)
	return map[string]function.Function{
		"file":       b.bound(fileFunc(dir, lim), nil),
		"filebase64": b.bound(fileBase64Func(dir, base64.StdEncoding.DecodedLen(int(lim))), nil),
		"fileexists": b.bound(fileExistsFunc(dir), nil),
		"fileset":    b.bound(fileSetFunc(dir, b.lim.MaxCollectionLen), nil),
		"abspath":    b.bound(absPathFunc(dir), nil),
		"basename":   b.bound(filesystem.BasenameFunc, nil),
		"dirname":    b.bound(filesystem.DirnameFunc, nil),
		"pathexpand": b.bound(filesystem.PathExpandFunc, nil),
	}
}

// fileFunc is file(path): the content of a UTF-8 file, path relative to
// dir; a file larger than limit bytes is refused before it is read whole.
func fileFunc(dir string, limit int64) function.Function {
	return stringFunc(func(path string) (string, error) {
		b, err := readFileLimited("file", dir, path, limit)
		if err != nil {
			return "", err
		}
		if !utf8.Valid(b) {
			return "", fmt.Errorf("file: %s is not valid UTF-8 (filebase64 reads any file)", path)
		}
		return string(b), nil
	})
}

// fileBase64Func is filebase64(path): a file's content in base64, the
// file at most limit bytes.
func fileBase64Func(dir string, limit int) function.Function {
	return stringFunc(func(path string) (string, error) {
		b, err := readFileLimited("filebase64", dir, path, int64(limit))
		if err != nil {
			return "", err
		}
		return base64.StdEncoding.EncodeToString(b), nil
	})
}

// readLimited reads a file relative to dir for fn, refusing one larger
// than limit bytes before reading it whole.
func readFileLimited(fn, dir, path string, limit int64) ([]byte, error) {
	p, err := inDir(dir, path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fn, err)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fn, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", fn, err)
	case int64(len(b)) > limit:
		return nil, limitErr("%s: %s is larger than the limit of %d bytes", fn, path, limit)
	}
	return b, nil
}

// fileExistsFunc is fileexists(path): whether a regular file is there (a
// directory is an error, as in Nomad).
func fileExistsFunc(dir string) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "path", Type: cty.String}},
		Type:   function.StaticReturnType(cty.Bool),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			p, err := inDir(dir, args[0].AsString())
			if err != nil {
				return cty.UnknownVal(cty.Bool), fmt.Errorf("fileexists: %w", err)
			}
			fi, err := os.Stat(p)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return cty.False, nil
			case err != nil:
				return cty.UnknownVal(cty.Bool), fmt.Errorf("fileexists: %w", err)
			case !fi.Mode().IsRegular():
				return cty.UnknownVal(cty.Bool), fmt.Errorf("fileexists: %s is not a regular file", args[0].AsString())
			}
			return cty.True, nil
		},
	})
}

// absPathFunc is abspath(path): path made absolute against dir (the
// jobspec's directory, where Nomad takes its working directory), with
// forward slashes.
func absPathFunc(dir string) function.Function {
	return stringFunc(func(path string) (string, error) {
		p, err := inDir(dir, path)
		if err == nil {
			p, err = filepath.Abs(p)
		}
		if err != nil {
			return "", fmt.Errorf("abspath: %w", err)
		}
		return filepath.ToSlash(p), nil
	})
}

// fileSetFunc is fileset(path, pattern): the regular files under path
// (relative to dir) whose path relative to it matches pattern ("*", "?",
// "[...]", "{a,b}" and "**" for any number of directories), with forward
// slashes. The walk visits at most limit entries and does not follow
// symbolic links to directories (a link to a regular file matches).
func fileSetFunc(dir string, limit int) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "path", Type: cty.String}, {Name: "pattern", Type: cty.String}},
		Type:   function.StaticReturnType(cty.Set(cty.String)),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			root, err := inDir(dir, args[0].AsString())
			if err != nil {
				return cty.UnknownVal(cty.Set(cty.String)), fmt.Errorf("fileset: %w", err)
			}
			matches, err := fileSet(root, args[1].AsString(), limit)
			if err != nil {
				return cty.UnknownVal(cty.Set(cty.String)), err
			}
			if len(matches) == 0 {
				return cty.SetValEmpty(cty.String), nil
			}
			vals := make([]cty.Value, len(matches))
			for i, m := range matches {
				vals[i] = cty.StringVal(m)
			}
			return cty.SetVal(vals), nil
		},
	})
}

// fileSet walks root for fileSetFunc. A pattern without "**" matches at
// a fixed depth, below which the walk does not descend.
func fileSet(root, pattern string, limit int) ([]string, error) {
	// Cleaned as a path below root: "./x" is "x", and ".." stays inside.
	pattern = strings.TrimPrefix(slashpath.Clean("/"+filepath.ToSlash(pattern)), "/")
	if _, err := doublestar.Match(pattern, "x"); err != nil {
		return nil, fmt.Errorf("fileset: invalid pattern %q: %w", pattern, err)
	}
	w := fileWalk{root: root, pattern: pattern, limit: limit, maxDepth: -1}
	if !strings.Contains(pattern, "**") {
		w.maxDepth = strings.Count(pattern, "/") + 1
	}
	err := w.dir("", 1)
	switch {
	case errors.Is(err, fs.ErrNotExist) && len(w.out) == 0 && w.visited == 0:
		return nil, nil // no such directory: no files, as in Nomad
	case errors.Is(err, ErrLimitExceeded):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("fileset: %w", err)
	}
	return w.out, nil
}

// fileWalk is one fileset walk. It reads directories in batches, so that
// the visit limit bounds the work even in a directory of millions of
// entries.
type fileWalk struct {
	root, pattern string
	limit         int
	maxDepth      int // -1: any
	visited       int
	out           []string
}

// dir walks the directory rel (slash-separated, "" for the root), whose
// entries are at depth.
func (w *fileWalk) dir(rel string, depth int) error {
	f, err := os.Open(filepath.Join(w.root, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		entries, err := f.ReadDir(256)
		for _, e := range entries {
			if err := w.entry(slashpath.Join(rel, e.Name()), e, depth); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (w *fileWalk) entry(rel string, e fs.DirEntry, depth int) error {
	if w.visited++; w.visited > w.limit {
		return limitErr("fileset visited more than %d files and directories under %s; narrow the path or the pattern", w.limit, w.root)
	}
	if e.IsDir() {
		if w.maxDepth >= 0 && depth >= w.maxDepth {
			return nil
		}
		return w.dir(rel, depth+1)
	}
	ok, err := doublestar.Match(w.pattern, rel)
	if err != nil {
		return fmt.Errorf("invalid pattern %q: %w", w.pattern, err)
	}
	if ok && isRegular(filepath.Join(w.root, filepath.FromSlash(rel)), e) {
		w.out = append(w.out, rel)
	}
	return nil
}

// isRegular reports whether a walked entry is a regular file or a link to
// one.
func isRegular(p string, d fs.DirEntry) bool {
	if d.Type()&fs.ModeSymlink == 0 {
		return d.Type().IsRegular()
	}
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// inDir resolves path against dir unless it is absolute; a leading "~/"
// is the user's home directory, as in Nomad.
func inDir(dir, path string) (string, error) {
	if path == "~" || strings.HasPrefix(path, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("failed to expand ~: %w", err)
		}
		return filepath.Join(home, path[1:]), nil
	}
	if filepath.IsAbs(path) {
		return path, nil
	}
	return filepath.Join(dir, path), nil
}
