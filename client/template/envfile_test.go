package template

import (
	"strings"
	"testing"
)

// Env templates are read as Nomad reads them (go-envparse): double quotes
// take JSON escapes, so `{{ x | toJSON }}` carries newlines; an unquoted
// '#' starts a comment; quoting styles may be mixed; bad lines fail.
func TestParseEnvLikeNomad(t *testing.T) {
	got, err := parseEnv([]byte(strings.Join([]string{
		`CERT="-----BEGIN-----\nAAA\n-----END-----\n"`,
		`QUOTE="say \"hi\" \\ \/ \u00e9\ud83d\udd25\tx"`,
		`PORT = 8080 # the listener`,
		`NAME="web app" # trailing comment`,
		`HASH='a#b'`,
		`MIXED=a "b c" 'd'`,
		`SQ='no \n escapes'`,
		`EMPTY=`,
		`export X.Y/Z=1`,
	}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"CERT":  "-----BEGIN-----\nAAA\n-----END-----\n",
		"QUOTE": "say \"hi\" \\ / \u00e9\U0001F525\tx",
		"PORT":  "8080", "NAME": "web app", "HASH": "a#b", "MIXED": "a b c d",
		"SQ": `no \n escapes`, "EMPTY": "", "X.Y/Z": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %q", got)
	}
	for _, bad := range []string{`A="open`, `A='open`, `A="\q"`, `A="\u12"`, `1A=x`, `A-B=x`, `=x`, `A B=x`, "A=x\x01y"} {
		if _, err := parseEnv([]byte("OK=1\n" + bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: err %v, want an error on line 2", bad, err)
		}
	}
}
