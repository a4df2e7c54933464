package template

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrEnvSyntax is returned for an env template line Nomad would refuse.
var ErrEnvSyntax = errors.New("invalid env line")

// parseEnv reads KEY=VALUE lines with the rules of Nomad's env templates
// (hashicorp/go-envparse): blank lines and lines starting with '#' are
// skipped; a key is [A-Za-z_][A-Za-z0-9_./]*, after an optional "export ";
// in the value, unquoted text ends at '#' (a comment, its trailing blanks
// dropped), '...' is kept as written and "..." takes JSON's escapes (\n,
// \t, \", \\, \uXXXX...), so `KEY={{ x | toJSON }}` carries any string;
// these may follow one another. Control characters and unmatched quotes
// fail the line.
func parseEnv(b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, err := parseEnvLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("failed to read env lines: %w", err)
	}
	return out, nil
}

func parseEnvLine(line string) (string, string, error) {
	k, v, ok := strings.Cut(line, "=")
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not KEY=VALUE", ErrEnvSyntax, line)
	}
	k = strings.TrimSpace(k)
	if len(k) > len("export ") {
		k = strings.TrimPrefix(k, "export ")
	}
	if !validEnvKey(k) {
		return "", "", fmt.Errorf("%w: key %q is not [A-Za-z_][A-Za-z0-9_./]*", ErrEnvSyntax, k)
	}
	v, err := envValue(strings.TrimSpace(v))
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", k, err)
	}
	return k, v, nil
}

func validEnvKey(k string) bool {
	for i, c := range []byte(k) {
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '.' || c == '/'):
		default:
			return false
		}
	}
	return k != ""
}

// envValue decodes a value's quoting (see parseEnv).
func envValue(s string) (string, error) {
	if i := strings.IndexFunc(s, func(r rune) bool { return r < ' ' }); i >= 0 {
		return "", fmt.Errorf("%w: control character %#02x", ErrEnvSyntax, s[i])
	}
	var out strings.Builder
	sig := 0 // out's length without the unquoted blanks that end it
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case '#':
			return out.String()[:sig], nil
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", fmt.Errorf("%w: unmatched '", ErrEnvSyntax)
			}
			out.WriteString(s[i+1 : i+1+j])
			sig, i = out.Len(), i+j+2
		case '"':
			j := closingQuote(s, i+1)
			if j < 0 {
				return "", fmt.Errorf("%w: unmatched \"", ErrEnvSyntax)
			}
			var dec string
			if err := json.Unmarshal([]byte(s[i:j+1]), &dec); err != nil {
				return "", fmt.Errorf("%w: bad escape in %s: %w", ErrEnvSyntax, s[i:j+1], err)
			}
			out.WriteString(dec)
			sig, i = out.Len(), j+1
		default:
			out.WriteByte(c)
			if c != ' ' {
				sig = out.Len()
			}
			i++
		}
	}
	return out.String(), nil
}

// closingQuote returns the index of the first '"' at or after i that no
// backslash escapes, or -1.
func closingQuote(s string, i int) int {
	for ; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}
