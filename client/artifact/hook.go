package artifact

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/structs"
)

// HookName is the artifact hook's name, recorded once its work is done.
const HookName = "artifacts"

// Hook fetches a task's artifacts before it starts (a taskrunner
// PrestartHook). It is done once every artifact is fetched: a restart or
// an agent restore does not fetch them again.
type Hook struct {
	fetcher *Fetcher
	// sharedDir is the allocation's shared alloc/ dir: local sources
	// are read from it or from the task's own dir, never from another
	// task's (its secrets/).
	sharedDir string
	logger    hclog.Logger
}

// NewHook returns the hook; sharedDir is the allocation's alloc/ dir.
func NewHook(f *Fetcher, sharedDir string, logger hclog.Logger) *Hook {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Hook{fetcher: f, sharedDir: sharedDir, logger: logger}
}

// Name implements taskrunner.PrestartHook.
func (h *Hook) Name() string { return HookName }

// Prestart implements taskrunner.PrestartHook: it emits "Downloading
// Artifacts", fetches each artifact in order and chowns those that ask to
// the task's user. The first failure emits "Failed Artifact Download" and
// is returned.
func (h *Hook) Prestart(ctx context.Context, req *taskrunner.PrestartRequest) (bool, error) {
	t := req.Task
	if len(t.Artifacts) == 0 {
		return true, nil
	}
	logger := h.logger.With("alloc_id", req.Alloc.ID, "task", t.Name)
	req.Emit(&structs.TaskEvent{Type: structs.TaskDownloadingArtifacts, Time: time.Now().UnixNano(),
		DisplayMessage: "Client is downloading artifacts"})
	for _, a := range t.Artifacts {
		r := h.request(a, req)
		start := time.Now()
		err := h.fetcher.Fetch(ctx, r)
		if err == nil && a.Chown {
			err = chown(filepath.Join(req.TaskDir.Dir, r.Dest), t.User)
		}
		if err != nil {
			err = fmt.Errorf("failed to download artifact %q: %w", redact(r.Source), err)
			req.Emit(&structs.TaskEvent{Type: structs.TaskArtifactDownloadFailed, Time: time.Now().UnixNano(),
				DownloadError: err.Error(), DisplayMessage: err.Error()})
			return false, err
		}
		logger.Debug("artifact downloaded", "source", redact(r.Source), "destination", r.Dest, "duration", time.Since(start))
	}
	return true, nil
}

// request interpolates an artifact with the task's environment, as Nomad
// does for source, destination, options and headers.
func (h *Hook) request(a *structs.TaskArtifact, req *taskrunner.PrestartRequest) Request {
	env := req.Env
	expand := func(s string) string {
		if env == nil {
			return s
		}
		return env.ReplaceEnv(s)
	}
	return Request{
		Source:    expand(a.GetterSource),
		Options:   expandMap(a.GetterOptions, expand),
		Headers:   expandMap(a.GetterHeaders, expand),
		Mode:      a.Mode(),
		TaskDir:   req.TaskDir.Dir,
		Dest:      expand(a.Dest()),
		FileRoots: []string{req.TaskDir.Dir, h.sharedDir},
		Insecure:  a.GetterInsecure,
	}
}

func expandMap(m map[string]string, expand func(string) string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = expand(v)
	}
	return out
}

// redact hides a URL's password (sources may carry credentials).
func redact(src string) string {
	u, err := url.Parse(src)
	if err != nil || u.User == nil {
		return src
	}
	return u.Redacted()
}

// chown gives p and everything under it to the task's user. Links are
// changed themselves, never followed. A task without a user has nothing
// to chown to: its task dir, and so the artifact, stay the agent's.
func chown(p, userName string) error {
	if userName == "" {
		return nil
	}
	uid, gid, err := allocdir.LookupUser(userName)
	if err != nil {
		return fmt.Errorf("failed to chown artifact: %w", err)
	}
	err = filepath.WalkDir(p, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("failed to chown artifact to %s: %w", userName, err)
	}
	return nil
}

var _ taskrunner.PrestartHook = (*Hook)(nil)
