package scheduler

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-version"
)

// ErrInvalidVersionConstraint is returned when the value of a version or
// semver constraint does not parse.
var ErrInvalidVersionConstraint = errors.New("invalid version constraint")

// checkVersion reports whether the attribute value have satisfies want as
// Nomad's "version" operator: want is a comma-separated list of go-version
// constraints (=, !=, <, <=, >, >=, ~>), all of which must hold. As in
// go-version, a pre-release version (anything after '-', as in a kernel's
// "5.15.0-91-generic") satisfies an ordering constraint only when the
// constraint names a pre-release of the same base version, so it fails
// ">= 5.4"; build metadata after '+' is ignored. A value that is not a
// version satisfies nothing.
func checkVersion(have, want string) (bool, error) {
	cs, err := version.NewConstraint(want)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalidVersionConstraint, err)
	}
	v, err := version.NewVersion(have)
	if err != nil {
		return false, nil
	}
	return cs.Check(v), nil
}

// semverConstraint is one "<op> <version>" of a semver constraint.
type semverConstraint struct {
	op string
	v  *version.Version
}

// semverOps are the operators of Nomad's "semver" constraints, longest
// first so that ">=" is not read as ">". There is no pessimistic "~>".
var semverOps = []string{">=", "<=", "!=", ">", "<", "="}

// parseSemver parses a comma-separated list of "<op> <version>" where
// each version is strict Semantic Versioning (a '-' before a pre-release,
// dot-separated identifiers) and op defaults to "=".
func parseSemver(want string) ([]semverConstraint, error) {
	var out []semverConstraint
	for _, part := range strings.Split(want, ",") {
		s := strings.TrimSpace(part)
		op := "="
		for _, o := range semverOps {
			if rest, ok := strings.CutPrefix(s, o); ok {
				op, s = o, strings.TrimSpace(rest)
				break
			}
		}
		v, err := version.NewSemver(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrInvalidVersionConstraint, strings.TrimSpace(part), err)
		}
		out = append(out, semverConstraint{op: op, v: v})
	}
	return out, nil
}

// checkSemver reports whether the attribute value have satisfies want as
// Nomad's "semver" operator: the constraints of parseSemver, all of which
// must hold, compared with Semantic Versioning 2.0 precedence, so a
// pre-release orders just below its release ("5.15.0-91-generic" satisfies
// ">= 5.4" but not ">= 5.15.0") and build metadata is ignored.
func checkSemver(have, want string) (bool, error) {
	cs, err := parseSemver(want)
	if err != nil {
		return false, err
	}
	v, err := version.NewVersion(have)
	if err != nil {
		return false, nil
	}
	for _, c := range cs {
		if !compareHolds(c.op, v.Compare(c.v)) {
			return false, nil
		}
	}
	return true, nil
}

// compareHolds reports whether a comparison result c (-1, 0, 1) satisfies
// op.
func compareHolds(op string, c int) bool {
	switch op {
	case "!=":
		return c != 0
	case ">":
		return c > 0
	case "<":
		return c < 0
	case ">=":
		return c >= 0
	case "<=":
		return c <= 0
	}
	return c == 0
}
