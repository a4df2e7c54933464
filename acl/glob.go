package acl

import (
	"sort"
	"strings"
)

// globMatch reports whether s matches pattern, where '*' matches any
// run of characters (the empty one too) and every other character
// itself: Nomad's namespace and host volume globs.
func globMatch(pattern, s string) bool {
	star, mark := -1, 0 // last '*' seen in pattern, and where s stood then
	p, i := 0, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// globRule is a glob label's merged capabilities.
type globRule struct {
	pattern string
	literal int // characters of pattern that are not '*'
	caps    capSet
}

// labelRules holds the merged namespace (or host volume) rules of an
// ACL: exact labels and globs apart.
type labelRules struct {
	exact map[string]capSet
	globs []globRule // sorted by pattern, for a deterministic tie-break
}

// add merges caps into the rule for label (union; deny stays in the set
// and so still wins).
func (l *labelRules) add(label string, caps capSet) {
	if l.exact == nil {
		l.exact = map[string]capSet{}
	}
	s, ok := l.exact[label]
	if !ok {
		s = capSet{}
		l.exact[label] = s
	}
	for c := range caps {
		s[c] = struct{}{}
	}
}

// finish moves the glob labels out of exact into globs.
func (l *labelRules) finish() {
	for label, caps := range l.exact {
		if !strings.Contains(label, "*") {
			continue
		}
		l.globs = append(l.globs, globRule{
			pattern: label,
			literal: len(label) - strings.Count(label, "*"),
			caps:    caps,
		})
		delete(l.exact, label)
	}
	sort.Slice(l.globs, func(i, j int) bool { return l.globs[i].pattern < l.globs[j].pattern })
}

// lookup returns the one rule that applies to name, or nil. Nomad's
// namespace rules
// (https://developer.hashicorp.com/nomad/docs/other-specifications/acl-policy):
// "the namespace rule is selected by first checking for an exact match, before
// falling back to a glob-based lookup. When looking up the namespace by
// glob, the matching rule with the greatest number of matched characters
// will be chosen" - that is, the fewest characters left to the '*'s
// (Nomad's example: "production-web" is 9 characters different from
// "*-web" but 13 from "*"). Ties go to the smaller pattern in byte
// order, so the choice never depends on map order.
func (l *labelRules) lookup(name string) capSet {
	if caps, ok := l.exact[name]; ok {
		return caps
	}
	var best capSet
	bestLeft := -1
	for _, g := range l.globs {
		if !globMatch(g.pattern, name) {
			continue
		}
		if left := len(name) - g.literal; bestLeft < 0 || left < bestLeft {
			best, bestLeft = g.caps, left
		}
	}
	return best
}
