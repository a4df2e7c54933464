package versioncheck

import (
	"errors"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		op, want string
		ok       bool
	}{
		{OpVersion, ">= 1.6, < 1.9", true},
		{OpVersion, "~> 1.9.0", true},
		{OpVersion, ">= five", false},
		{OpVersion, "", false},
		{OpSemver, ">= 1.2.0, < 2.0.0", true},
		{OpSemver, "1.2.3-beta.1", true},
		{OpSemver, "~> 1.2", false}, // no pessimistic operator in semver
		{OpSemver, ">= 1.2.0,", false},
		{"regexp", "[", true}, // not this package's operator
	}
	for _, tc := range tests {
		err := Validate(tc.op, tc.want)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("Validate(%q, %q) = %v; want ok=%v", tc.op, tc.want, err, tc.ok)
		}
	}
}

// Check agrees with Validate: a value Validate refuses fails every check
// with ErrInvalid, whatever the attribute.
func TestCheckInvalid(t *testing.T) {
	for _, op := range []string{OpVersion, OpSemver} {
		if ok, err := Check(op, "1.2.3", "~> x"); ok || !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%q, ~> x) = %v, %v", op, ok, err)
		}
		if ok, err := Check(op, "1.2.3", ">= 1.0.0"); !ok || err != nil {
			t.Errorf("Check(%q, >= 1.0.0) = %v, %v", op, ok, err)
		}
	}
}
