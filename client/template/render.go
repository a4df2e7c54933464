package template

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/structs"
)

// Defaults applied when a template (e.g. one submitted as JSON and not
// canonicalized) leaves a field unset; the wait defaults are Nomad's
// client defaults.
const (
	DefaultSplay   = 5 * time.Second
	DefaultWaitMin = 5 * time.Second
	DefaultWaitMax = 4 * time.Minute
)

// Dirs are the directories templates resolve their paths in.
type Dirs struct {
	// TaskDir is the task's directory: relative paths start there.
	TaskDir string
	// SharedDir is the allocation's shared alloc/ directory.
	SharedDir string
}

// tmpl is one template block, resolved for its task.
type tmpl struct {
	index      int
	spec       *structs.Template
	text       string // the template source
	out        fileSpec
	mode       string // change_mode
	signal     string
	envvars    bool
	splay      time.Duration
	waitMin    time.Duration
	waitMax    time.Duration
	left       string
	right      string
	errMissing bool
	// rendered is set after the first successful render.
	rendered bool
	// usesFile: the last render read a file (polled for changes).
	usesFile bool
	// reads are the services the last successful render read, readsAll
	// whether it read the list of every service; nil reads: not known
	// (no render yet, or the last one failed before reading everything).
	reads    map[string]bool
	readsAll bool
	// lastMissing and lastErr are what was last reported, to report
	// changes only.
	lastMissing string
	lastErr     string
}

// name is how events and logs refer to the template.
func (t *tmpl) name() string { return fmt.Sprintf("template[%d] (%s)", t.index, t.out.rel) }

// resolve builds a tmpl: it interpolates the paths with the task's
// environment, places them in their sandbox and loads the source.
func resolve(i int, spec *structs.Template, dirs Dirs, expand func(string) string) (*tmpl, error) {
	t := &tmpl{index: i, spec: spec, mode: strOr(spec.ChangeMode, structs.TemplateChangeModeRestart),
		signal: strOr(spec.ChangeSignal, ""), envvars: spec.Envvars != nil && *spec.Envvars,
		splay: durOr(spec.Splay, DefaultSplay), waitMin: DefaultWaitMin, waitMax: DefaultWaitMax,
		left: strOr(spec.LeftDelim, "{{"), right: strOr(spec.RightDelim, "}}"),
		errMissing: spec.ErrMissingKey != nil && *spec.ErrMissingKey}
	if w := spec.Wait; w != nil {
		t.waitMin, t.waitMax = durOr(w.Min, t.waitMin), durOr(w.Max, t.waitMax)
	}
	if t.waitMax < t.waitMin {
		t.waitMax = t.waitMin
	}
	if t.mode == structs.TemplateChangeModeScript {
		return nil, fmt.Errorf("template[%d]: change_mode %q is not supported by meshlet", i, t.mode)
	}
	perms, err := strconv.ParseUint(strOr(spec.Perms, "0644"), 8, 12)
	if err != nil {
		return nil, fmt.Errorf("template[%d]: invalid perms %q: %w", i, *spec.Perms, err)
	}
	t.out = fileSpec{mode: os.FileMode(perms), uid: intOr(spec.Uid, -1), gid: intOr(spec.Gid, -1)}
	dest := expand(strOr(spec.DestPath, ""))
	if dest == "" {
		return nil, fmt.Errorf("template[%d]: missing destination", i)
	}
	if t.out.root, t.out.rel, err = sandbox(dirs, dest); err != nil {
		return nil, fmt.Errorf("template[%d]: destination %q: %w", i, dest, err)
	}
	if src := expand(strOr(spec.SourcePath, "")); src != "" {
		b, err := readInDir(dirs.TaskDir, taskPath(dirs, src))
		if err != nil {
			return nil, fmt.Errorf("template[%d]: failed to read source: %w", i, err)
		}
		t.text = string(b)
	} else {
		t.text = strOr(spec.EmbeddedTmpl, "")
	}
	return t, nil
}

// taskPath makes p a host path in the task directory: relative paths and
// chroot paths ("/local/x", as NOMAD_TASK_DIR reads in an exec task) are
// taken from the task directory, host paths already inside it are kept.
func taskPath(dirs Dirs, p string) string {
	if filepath.IsAbs(p) {
		if _, ok := relInside(dirs.TaskDir, filepath.Clean(p)); ok {
			return filepath.Clean(p)
		}
	}
	return filepath.Join(dirs.TaskDir, p)
}

// sandbox places dest in the task directory or the shared alloc directory
// (Nomad's "../alloc/x", NOMAD_ALLOC_DIR, or "/alloc/x" in a chroot), and
// rejects anything else.
func sandbox(dirs Dirs, dest string) (root, rel string, err error) {
	var p string
	switch {
	case filepath.IsAbs(dest) && isUnder(dirs.SharedDir, dest):
		p = filepath.Clean(dest)
	case dest == "/alloc" || strings.HasPrefix(dest, "/alloc/"):
		p = filepath.Join(dirs.SharedDir, strings.TrimPrefix(dest, "/alloc"))
	default:
		p = taskPath(dirs, dest)
	}
	for _, root := range []string{dirs.TaskDir, dirs.SharedDir} {
		rel, ok := relInside(root, p)
		if !ok || rel == "." {
			continue
		}
		if root == dirs.SharedDir && (rel == allocdir.RunDirName || strings.HasPrefix(rel, allocdir.RunDirName+"/")) {
			// alloc/run holds meshlet's sockets: the agent's, not the job's.
			return "", "", ErrEscapes
		}
		return root, rel, nil
	}
	return "", "", ErrEscapes
}

func isUnder(root, p string) bool {
	_, ok := relInside(root, filepath.Clean(p))
	return ok
}

// render executes the template with rc; missing data is in rc.missing.
func (t *tmpl) render(rc *renderCtx) ([]byte, error) {
	tp := template.New(t.name()).Delims(t.left, t.right).Funcs(rc.funcs())
	if t.errMissing {
		tp = tp.Option("missingkey=error")
	}
	tp, err := tp.Parse(t.text)
	if err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", t.name(), err)
	}
	var buf cappedBuffer
	if err := tp.Execute(&buf, nil); err != nil {
		return nil, fmt.Errorf("failed to render %s: %w", t.name(), err)
	}
	return buf.Bytes(), nil
}

// cappedBuffer fails a write that would take it over maxRenderBytes,
// which stops the template's execution. It has no other write method
// (WriteString, ReadFrom) that could bypass the cap.
type cappedBuffer struct{ buf bytes.Buffer }

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > maxRenderBytes {
		return 0, fmt.Errorf("%w (%d bytes)", ErrTooLarge, maxRenderBytes)
	}
	return b.buf.Write(p)
}

func (b *cappedBuffer) Bytes() []byte { return b.buf.Bytes() }

func strOr(p *string, def string) string {
	if p == nil || *p == "" {
		return def
	}
	return *p
}

func durOr(p *time.Duration, def time.Duration) time.Duration {
	if p == nil {
		return def
	}
	return *p
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}
