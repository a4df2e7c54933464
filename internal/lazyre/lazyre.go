// Package lazyre holds package-level regular expressions that are compiled
// on first use rather than at program start. Every meshlet process runs
// the one binary's package initialisation (task executors, sidecars, the
// agent), and a compiled expression with counted repetitions such as
// {0,61} keeps tens of kilobytes of program alive in each of them, mostly
// for validators only the agent's API ever calls. The expression is still
// parsed at start, so a malformed one fails there, as with
// regexp.MustCompile.
package lazyre

import (
	"regexp"
	"regexp/syntax"
	"sync"
)

// Regexp is a regular expression compiled on first use.
type Regexp struct {
	get func() *regexp.Regexp
}

// New returns expr, checked now and compiled on first use. It panics if
// expr does not parse, as regexp.MustCompile does.
func New(expr string) *Regexp {
	if _, err := syntax.Parse(expr, syntax.Perl); err != nil {
		panic(`lazyre: New(` + expr + `): ` + err.Error())
	}
	return &Regexp{get: sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })}
}

// MatchString reports whether s contains a match of the expression.
func (r *Regexp) MatchString(s string) bool { return r.get().MatchString(s) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.get().FindStringSubmatch(s) }
