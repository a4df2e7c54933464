package template

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/structs"
)

// Nomad's event messages.
const (
	msgRestart  = "Template with change_mode restart re-rendered"
	msgRendered = "Template re-rendered"
)

// dirty is a template with a change not yet rendered.
type dirty struct {
	first, last time.Time
}

// due is when a change to t is rendered: wait.min after the last change,
// at the latest wait.max after the first.
func (d dirty) due(t *tmpl) time.Time {
	at := d.last.Add(t.waitMin)
	if limit := d.first.Add(t.waitMax); at.After(limit) {
		return limit
	}
	return at
}

// watch re-renders templates when their data changes and applies their
// change modes, until Stop. A restored task starts with every template
// due for a (quiet) re-render.
func (h *Hook) watch(restored bool) {
	defer close(h.doneCh)
	pending := map[*tmpl]dirty{}
	if restored {
		// The catalog fills again as the agent restores its allocations:
		// wait before comparing, so a half-filled catalog restarts nothing.
		at := time.Now().Add(h.cfg.RestoreDelay)
		for _, t := range h.tmpls {
			pending[t] = dirty{first: at, last: at}
		}
	}
	// Changes during the first render may have been taken for one that
	// still waited for data, after others had rendered: look at them all.
	h.markChanged(pending)
	poll := time.NewTicker(h.cfg.FilePoll)
	defer poll.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		h.arm(timer, pending)
		select {
		case <-h.stopCh:
			return
		case <-h.changes:
			h.markChanged(pending)
		case <-poll.C:
			// A poll is a check, not a change: it schedules the templates
			// that read files (or still wait for data) unless they are
			// pending already, whose quiet period it must not extend.
			h.markAll(pending, func(t *tmpl) bool {
				_, ok := pending[t]
				return !ok && (t.usesFile || !t.rendered)
			})
		case <-timer.C:
			if changed := h.renderDue(pending); len(changed) > 0 {
				h.apply(changed)
			}
		}
	}
}

// markChanged schedules the templates a catalog change can affect. Only
// those are deferred: as consul-template's quiescence counts the changes
// of a template's own dependencies, changes elsewhere in the cluster do
// not push a template's render back towards its wait.max.
func (h *Hook) markChanged(pending map[*tmpl]dirty) {
	changed, all := h.takeChanges()
	if !all && len(changed) == 0 {
		return
	}
	h.markAll(pending, func(t *tmpl) bool { return t.affectedBy(changed, all) })
}

// affectedBy reports whether a change to the changed services (all: to
// services not named) can change t's output. Until t has rendered, and
// after a failed render (which may have stopped before reading all it
// reads), any change can.
func (t *tmpl) affectedBy(changed map[string]bool, all bool) bool {
	if all || t.readsAll || !t.rendered || t.reads == nil {
		return true
	}
	for s := range t.reads {
		if changed[s] {
			return true
		}
	}
	return false
}

func (h *Hook) markAll(pending map[*tmpl]dirty, keep func(*tmpl) bool) {
	now := time.Now()
	for _, t := range h.tmpls {
		if !keep(t) {
			continue
		}
		d, ok := pending[t]
		if !ok {
			d.first = now
		}
		if now.After(d.last) { // a restore delay keeps its later time
			d.last = now
		}
		pending[t] = d
	}
}

// arm sets timer to the earliest due change (an hour when none is).
func (h *Hook) arm(timer *time.Timer, pending map[*tmpl]dirty) {
	next := time.Hour
	for t, d := range pending {
		next = min(next, time.Until(d.due(t)))
	}
	timer.Reset(max(next, 0))
}

// renderDue renders the templates whose change is due and returns those
// whose file changed. A render error is recorded as an event; the file
// keeps its last content.
func (h *Hook) renderDue(pending map[*tmpl]dirty) []*tmpl {
	now := time.Now()
	var changed []*tmpl
	for _, t := range h.tmpls {
		d, ok := pending[t]
		if !ok || d.due(t).After(now) {
			continue
		}
		delete(pending, t)
		ch, err := h.renderOne(t)
		if err != nil {
			if msg := err.Error(); msg != t.lastErr { // report each new failure once
				t.lastErr = msg
				h.logger.Error("failed to re-render template", "template", t.name(), "error", err)
				h.event(TaskHookMessage, "Template failed: "+msg)
			}
			continue
		}
		t.lastErr = ""
		// A restored template's first render acts, as any other, only
		// when the file the task runs with changed.
		if ch {
			h.logger.Info("template re-rendered", "template", t.name())
			changed = append(changed, t)
		}
	}
	return changed
}

// apply waits the largest splay of the changed templates, then restarts
// the task once if any wants a restart, or sends each distinct signal, or
// records the re-render (noop).
func (h *Hook) apply(changed []*tmpl) {
	var splay time.Duration
	restart := false
	var signals []string
	for _, t := range changed {
		splay = max(splay, t.splay)
		switch t.mode {
		case structs.TemplateChangeModeRestart:
			restart = true
		case structs.TemplateChangeModeSignal:
			if !slices.Contains(signals, t.signal) {
				signals = append(signals, t.signal)
			}
		}
	}
	if splay > 0 {
		select {
		case <-time.After(time.Duration(h.cfg.Rand(int64(splay)))):
		case <-h.stopCh:
			return
		}
	}
	switch {
	case restart:
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-h.stopCh:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := h.task.RestartInPlace(ctx, msgRestart)
		cancel()
		h.logResult("restart", err)
	case len(signals) > 0:
		for _, sig := range signals {
			ev := taskrunner.NewEvent(structs.TaskSignaling)
			ev.DisplayMessage = msgRendered
			ev.Details = map[string]string{"signal": sig}
			h.logResult("signal "+sig, h.task.Signal(ev, sig))
		}
	default:
		h.event(TaskHookMessage, msgRendered)
	}
}

// logResult logs a change mode's outcome. A task that is not running
// (starting, restarting) needs nothing: its next start reads the files.
func (h *Hook) logResult(action string, err error) {
	switch {
	case err == nil:
	case errors.Is(err, taskrunner.ErrNotRunning):
		h.logger.Debug("task not running; template change applies at its next start", "action", action)
	default:
		h.logger.Error("failed to apply template change", "action", action, "error", err)
	}
}
