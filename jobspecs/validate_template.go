package jobspecs

import (
	"fmt"
	pathpkg "path"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

// templateSignals are the signal names change_signal accepts (Nomad's
// list, minus the ones that cannot be caught).
var templateSignals = []string{"SIGABRT", "SIGALRM", "SIGBUS", "SIGCHLD", "SIGCONT", "SIGFPE", "SIGHUP",
	"SIGILL", "SIGINT", "SIGIO", "SIGIOT", "SIGPIPE", "SIGPROF", "SIGPWR", "SIGQUIT", "SIGSEGV", "SIGSTKFLT",
	"SIGSYS", "SIGTERM", "SIGTRAP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGUSR1", "SIGUSR2",
	"SIGVTALRM", "SIGWINCH", "SIGXCPU", "SIGXFSZ"}

// checkTemplates applies Nomad's template rules, and meshlet's: no change
// scripts.
func checkTemplates(ts []*structs.Template, p path, report reporter) {
	for i, t := range ts {
		tp := p.item("template", i, "")
		if t == nil {
			report(SeverityError, tp, "Missing template", "The template is null.")
			continue
		}
		checkTemplate(t, tp, report)
	}
}

func checkTemplate(t *structs.Template, p path, report reporter) {
	src, dst, data := deref(t.SourcePath), deref(t.DestPath), deref(t.EmbeddedTmpl)
	switch {
	case src == "" && data == "":
		report(SeverityError, p, "Missing template source",
			`A template needs data (an inline template) or source (a template file in the task directory).`)
	case src != "" && data != "":
		report(SeverityError, p.attr("source"), "Conflicting template source",
			"Set either source or data, not both.")
	}
	if src != "" && escapes(".", src) {
		report(SeverityError, p.attr("source"), "Template source escapes the task directory",
			fmt.Sprintf("source %q must be a path inside the task directory.", src))
	}
	if dst == "" {
		report(SeverityError, p.attr("destination"), "Missing template destination",
			`A template needs a destination, e.g. destination = "local/config.txt".`)
	} else if escapes("task", dst) {
		report(SeverityError, p.attr("destination"), "Template destination escapes the allocation directory",
			fmt.Sprintf("destination %q must be a path inside the task directory or the shared alloc directory (e.g. \"local/x\", \"${NOMAD_ALLOC_DIR}/x\").", dst))
	}
	checkTemplateChange(t, p, report)
	if t.Splay != nil && *t.Splay < 0 {
		report(SeverityError, p.attr("splay"), "Invalid splay", fmt.Sprintf("splay %s must not be negative.", *t.Splay))
	}
	if t.Perms != nil {
		if _, err := strconv.ParseUint(*t.Perms, 8, 12); err != nil {
			report(SeverityError, p.attr("perms"), "Invalid perms",
				fmt.Sprintf("perms %q is not an octal file mode such as \"644\".", *t.Perms))
		}
	}
	for _, id := range []struct {
		name string
		v    *int
	}{{"uid", t.Uid}, {"gid", t.Gid}} {
		if id.v != nil && *id.v < -1 {
			report(SeverityError, p.attr(id.name), "Invalid "+id.name,
				fmt.Sprintf("%s %d must be -1 (unset) or a user/group ID.", id.name, *id.v))
		}
	}
	if t.LeftDelim != nil && *t.LeftDelim == "" || t.RightDelim != nil && *t.RightDelim == "" {
		report(SeverityError, p, "Invalid template delimiter", "left_delimiter and right_delimiter must not be empty.")
	}
	if w := t.Wait; w != nil {
		wp := p.sub("wait")
		if w.Min != nil && *w.Min < 0 || w.Max != nil && *w.Max < 0 {
			report(SeverityError, wp, "Invalid wait", "wait min and max must not be negative.")
		} else if w.Min != nil && w.Max != nil && *w.Max > 0 && *w.Min > *w.Max {
			report(SeverityError, wp.attr("min"), "Invalid wait",
				fmt.Sprintf("wait min %s is greater than max %s.", *w.Min, *w.Max))
		}
	}
}

func checkTemplateChange(t *structs.Template, p path, report reporter) {
	mode := deref(t.ChangeMode)
	switch mode {
	case "", structs.TemplateChangeModeRestart, structs.TemplateChangeModeNoop:
	case structs.TemplateChangeModeSignal:
		if deref(t.ChangeSignal) == "" {
			report(SeverityError, p.attr("change_mode"), "Missing change_signal",
				`change_mode "signal" needs a change_signal, e.g. change_signal = "SIGHUP".`)
		}
		if t.Envvars != nil && *t.Envvars {
			report(SeverityError, p.attr("change_mode"), "Signal on an env template",
				`A template with env = true cannot use change_mode "signal": the environment of a running process cannot change; use "restart".`)
		}
	case structs.TemplateChangeModeScript:
		report(SeverityError, p.attr("change_mode"), "Unsupported change_mode",
			`change_mode "script" is not supported by meshlet; use "restart", "signal" or "noop".`)
	default:
		report(SeverityError, p.attr("change_mode"), "Invalid change_mode",
			fmt.Sprintf("change_mode %q is not valid; use \"restart\", \"signal\" or \"noop\".", mode))
	}
	if t.ChangeScript != nil && mode != structs.TemplateChangeModeScript {
		report(SeverityError, p.sub("change_script"), "Unsupported change_script",
			"change_script is not supported by meshlet; use change_mode \"restart\", \"signal\" or \"noop\".")
	}
	if sig := deref(t.ChangeSignal); sig != "" && !validSignal(sig) {
		report(SeverityError, p.attr("change_signal"), "Invalid change_signal",
			fmt.Sprintf("change_signal %q is not a signal name such as \"SIGHUP\" or \"SIGUSR1\".", sig))
	}
}

func validSignal(s string) bool {
	s = strings.ToUpper(s)
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	for _, v := range templateSignals {
		if v == s {
			return true
		}
	}
	return false
}

// escapes reports whether the relative path p, taken from dir, leads out of
// dir's parent when dir is "task" (the allocation directory: Nomad's
// PathEscapesAllocViaRelative), or out of the task directory when dir is
// ".". Absolute paths and interpolations such as ${NOMAD_ALLOC_DIR} are
// left to the client, which resolves them inside the task directory.
func escapes(dir, p string) bool {
	if strings.Contains(p, "${") || pathpkg.IsAbs(p) {
		return false
	}
	rel := pathpkg.Clean(pathpkg.Join(dir, p))
	return rel == ".." || strings.HasPrefix(rel, "../")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
