package jobspecs

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestParseVariables(t *testing.T) {
	got, err := ParseVariables("v.hcl", []byte("count = 3\ncmd = \"/bin/echo\"\nports = [1, 2]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"count": "3", "cmd": "/bin/echo", "ports": "[1, 2]"}; !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := ParseVariables("v.hcl", []byte("  \n"), nil); got != nil || err != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
	list := "[" + strings.Repeat("1,", 20_000) + "1]"
	tests := []struct{ src, want string }{
		{"count = \n", "invalid Variables: v.hcl:1:9: error: Invalid expression"},
		{"count = var.x\n", `variable "count" must be a constant`},
		{"count = upper(\"x\")\n", `variable "count" must be a constant`},
		// Two nested loops of 20,001: 400 million iterations.
		{"x = [for a in " + list + " : [for b in " + list + " : b]]\n", "Evaluating the jobspec costs more than"},
		{"x = " + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + "\n", "nest more than 128 levels"},
		{"x = 1e99999\n", "out of range"},
	}
	for _, tc := range tests {
		_, err := ParseVariables("v.hcl", []byte(tc.src), nil)
		if !errors.Is(err, ErrInvalidVariables) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: err = %v; want %q", tc.src, err, tc.want)
		}
	}
}
