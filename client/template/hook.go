package template

import (
	"context"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/structs"
)

// TaskHookMessage is the type of the events a template records about its
// own progress ("Missing: ...", "Template re-rendered"), as Nomad's.
const TaskHookMessage = "Task hook message"

// DefaultFilePoll is how often templates that read files with `file` are
// rendered again to notice a change.
const DefaultFilePoll = 5 * time.Second

// DefaultRestoreDelay is how long after an agent restart a restored task's
// templates are first rendered again (the catalog is being refilled).
const DefaultRestoreDelay = 5 * time.Second

// Task is what the hook needs of the task runner; *taskrunner.TaskRunner
// implements it.
type Task interface {
	RestartInPlace(ctx context.Context, reason string) error
	Signal(ev *structs.TaskEvent, sig string) error
	EmitEvent(ev *structs.TaskEvent)
}

// Config configures a Hook.
type Config struct {
	AllocID  string
	Task     *structs.Task
	Dirs     Dirs
	Catalog  Catalog // nil: service functions fail
	NodeName string
	Logger   hclog.Logger
	// Rand returns the splay in [0,n); nil = math/rand/v2.
	Rand func(n int64) int64
	// FilePoll overrides DefaultFilePoll.
	FilePoll time.Duration
	// RestoreDelay overrides DefaultRestoreDelay.
	RestoreDelay time.Duration
}

// Hook renders one task's templates; it implements taskrunner.TaskHook.
type Hook struct {
	cfg    Config
	logger hclog.Logger

	// Owned by Prestart, then by the watcher goroutine.
	tmpls   []*tmpl
	taskEnv map[string]string
	lookup  func(string) (string, bool)
	task    Task
	// watching: the watcher goroutine runs (set before it starts, read
	// by Stop on the runner's goroutine).
	watching bool
	changes  chan struct{} // wakes the watcher after a catalog change
	unsub    func()

	// chMu guards what the catalog changed since the watcher last looked:
	// the services named (changedAll: a change that named none).
	chMu       sync.Mutex
	changed    map[string]bool
	changedAll bool

	mu  sync.Mutex
	env map[int]map[string]string // env vars by template index

	stopOnce sync.Once
	stopCh   chan struct{}
	doneCh   chan struct{}
}

var _ taskrunner.TaskHook = (*Hook)(nil)

// New returns the hook of cfg.Task; nothing happens until Prestart.
func New(cfg Config) *Hook {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Rand == nil {
		cfg.Rand = mrand.Int64N
	}
	if cfg.FilePoll <= 0 {
		cfg.FilePoll = DefaultFilePoll
	}
	if cfg.RestoreDelay <= 0 {
		cfg.RestoreDelay = DefaultRestoreDelay
	}
	return &Hook{cfg: cfg, logger: cfg.Logger.Named("template").With("alloc_id", cfg.AllocID, "task", cfg.Task.Name),
		env: map[int]map[string]string{}, stopCh: make(chan struct{}), doneCh: make(chan struct{}),
		changes: make(chan struct{}, 1)}
}

// Env returns the variables of the env = true templates.
func (h *Hook) Env() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]string{}
	idx := make([]int, 0, len(h.env))
	for i := range h.env {
		idx = append(idx, i)
	}
	sort.Ints(idx) // a later template wins, as in Nomad
	for _, i := range idx {
		maps.Copy(out, h.env[i])
	}
	return out
}

// Stop ends the watcher and waits for it.
func (h *Hook) Stop() {
	h.stopOnce.Do(func() {
		close(h.stopCh)
		if h.unsub != nil {
			h.unsub()
		}
	})
	if h.watching {
		<-h.doneCh
	}
}

// Prestart implements taskrunner.TaskHook: it renders every template
// (blocking until their data exists) and starts the watcher. For a
// restored task it only reloads the env templates' files and lets the
// watcher re-render, which acts only when a file's content changes.
func (h *Hook) Prestart(ctx context.Context, req taskrunner.TaskHookRequest) error {
	if req.Task != nil {
		h.task = req.Task
	}
	expand := func(s string) string { return s }
	h.taskEnv = map[string]string{}
	if req.Env != nil {
		expand, h.taskEnv, h.lookup = req.Env.ReplaceEnv, req.Env.Map(), req.Env.Lookup
	}
	for i, spec := range h.cfg.Task.Templates {
		t, err := resolve(i, spec, h.cfg.Dirs, expand)
		if err != nil {
			return err
		}
		h.tmpls = append(h.tmpls, t)
	}
	if h.cfg.Catalog != nil {
		h.unsub = h.cfg.Catalog.Subscribe(h.notify)
	}
	if req.Restored {
		h.loadEnvFiles()
	} else if err := h.firstRender(ctx); err != nil {
		h.Stop()
		return err
	}
	if h.task == nil {
		return nil
	}
	h.watching = true
	go h.watch(req.Restored)
	return nil
}

// notify records a catalog change and wakes the watcher; it runs on the
// catalog's goroutine and must not block.
func (h *Hook) notify(ch catalog.Change) {
	h.chMu.Lock()
	if len(ch.Services) == 0 {
		h.changedAll = true
	}
	for _, s := range ch.Services {
		if h.changed == nil {
			h.changed = map[string]bool{}
		}
		h.changed[s] = true
	}
	h.chMu.Unlock()
	select {
	case h.changes <- struct{}{}:
	default:
	}
}

// takeChanges returns and forgets what the catalog changed since the last
// call.
func (h *Hook) takeChanges() (changed map[string]bool, all bool) {
	h.chMu.Lock()
	defer h.chMu.Unlock()
	changed, all = h.changed, h.changedAll
	h.changed, h.changedAll = nil, false
	return changed, all
}

// firstRender renders until every template is written, waiting for
// catalog changes while data is missing.
func (h *Hook) firstRender(ctx context.Context) error {
	for {
		pending := false
		for _, t := range h.tmpls {
			if t.rendered {
				continue
			}
			if _, err := h.renderOne(t); err != nil {
				return err
			}
			pending = pending || !t.rendered
		}
		if !pending {
			return nil
		}
		select {
		case <-h.changes:
		case <-time.After(h.cfg.FilePoll):
		case <-ctx.Done():
			return fmt.Errorf("template: stopped waiting for data: %w", ctx.Err())
		}
	}
}

// renderOne renders t, writes it when complete and reports whether its
// content changed. Missing data (first render only) is reported as an
// event and leaves t unrendered.
func (h *Hook) renderOne(t *tmpl) (bool, error) {
	rc := &renderCtx{cat: h.cfg.Catalog, env: h.taskEnv, lookup: h.lookup, taskDir: h.cfg.Dirs.TaskDir,
		nodeName: h.cfg.NodeName, strict: !t.rendered}
	out, err := t.render(rc)
	if err != nil {
		t.reads, t.readsAll = nil, false
		return false, err
	}
	t.usesFile = rc.usesFile
	t.reads, t.readsAll = rc.readSvcs, rc.readAll
	if t.reads == nil {
		t.reads = map[string]bool{}
	}
	if len(rc.missing) > 0 {
		if m := strings.Join(rc.missing, ", "); m != t.lastMissing {
			t.lastMissing = m
			h.logger.Info("template waiting for data", "template", t.name(), "missing", m)
			h.event(TaskHookMessage, "Missing: "+m)
		}
		return false, nil
	}
	if t.envvars {
		vars, err := parseEnv(out)
		if err != nil {
			return false, fmt.Errorf("failed to parse env %s: %w", t.name(), err)
		}
		h.mu.Lock()
		h.env[t.index] = vars
		h.mu.Unlock()
	}
	changed, err := writeIfChanged(t.out, out)
	if err != nil {
		return false, err
	}
	t.rendered, t.lastMissing = true, ""
	return changed, nil
}

// loadEnvFiles reads the env templates' files a previous agent wrote, so
// a restored task restarted before the first re-render keeps its vars.
// The task may have replaced them: they are read as `file` reads, bounded
// and without following links.
func (h *Hook) loadEnvFiles() {
	for _, t := range h.tmpls {
		if !t.envvars {
			continue
		}
		b, err := readInDir(t.out.root, t.out.rel)
		if err != nil {
			h.logger.Warn("failed to read back env template", "template", t.name(), "error", err)
			continue
		}
		if vars, err := parseEnv(b); err == nil {
			h.mu.Lock()
			h.env[t.index] = vars
			h.mu.Unlock()
		}
	}
}

// event records a task event, when a task is attached.
func (h *Hook) event(typ, msg string) {
	if h.task == nil {
		return
	}
	ev := taskrunner.NewEvent(typ)
	ev.DisplayMessage = msg
	h.task.EmitEvent(ev)
}
