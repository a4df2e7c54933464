// Package versioncheck evaluates the values of Nomad's "version" and
// "semver" constraint operators. The scheduler checks node attributes
// against them; jobspecs validates them at submit. It holds no state.
package versioncheck

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-version"
)

// ErrInvalid is returned when the value of a version or semver constraint
// does not parse.
var ErrInvalid = errors.New("invalid version constraint")

// Operators of the constraints this package evaluates.
const (
	OpVersion = "version"
	OpSemver  = "semver"
)

// Check reports whether the attribute value have satisfies the constraint
// want of operator op (OpVersion or OpSemver).
func Check(op, have, want string) (bool, error) {
	if op == OpSemver {
		return checkSemver(have, want)
	}
	return checkVersion(have, want)
}

// Validate returns an error wrapping ErrInvalid when want is not a valid
// value for operator op; other operators are not checked.
func Validate(op, want string) error {
	switch op {
	case OpVersion:
		if _, err := version.NewConstraint(want); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	case OpSemver:
		_, err := parseSemver(want)
		return err
	}
	return nil
}

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
		return false, fmt.Errorf("%w: %w", ErrInvalid, err)
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
			return nil, fmt.Errorf("%w: %q: %w", ErrInvalid, strings.TrimSpace(part), err)
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
