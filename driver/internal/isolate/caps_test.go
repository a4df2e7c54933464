package isolate

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCaps(t *testing.T) {
	def, err := ParseCaps(DefaultCaps())
	if err != nil || len(def.Names()) != len(DefaultCaps()) {
		t.Fatalf("default caps: %v, %v", def, err)
	}
	got, err := ParseCaps([]string{"CAP_KILL", "Chown", " cap_net_raw ", "kill"})
	if err != nil || got != 1<<unix.CAP_KILL|1<<unix.CAP_CHOWN|1<<unix.CAP_NET_RAW {
		t.Fatalf("spellings: %v, %v", got, err)
	}
	if got.String() != "chown, kill, net_raw" {
		t.Fatalf("String() = %q", got)
	}
	all, err := ParseCaps([]string{"ALL"})
	if err != nil || all != SupportedCaps() || !all.Has(unix.CAP_SYS_ADMIN) {
		t.Fatalf("all: %v, %v", all, err)
	}
	_, err = ParseCaps([]string{"sys_admin", "CAP_BOGUS", "nope"})
	if !errors.Is(err, ErrUnknownCap) || !strings.HasSuffix(err.Error(), "capabilities not supported by system: bogus, nope") {
		t.Fatalf("unknown names: %v", err)
	}
	if s, err := ParseCaps(nil); err != nil || s != 0 {
		t.Fatalf("nil: %v, %v", s, err)
	}
}

// TestTaskCaps follows Nomad's capabilities.Calculate: defaults within
// allow_caps, minus cap_drop, plus cap_add; cap_add must be allowed.
func TestTaskCaps(t *testing.T) {
	withRaw := append(DefaultCaps(), "net_raw")
	tests := []struct {
		name             string
		allow, add, drop []string
		want, wantAdded  []string
		wantErr          string
	}{
		{name: "defaults", allow: DefaultCaps(), want: DefaultCaps()},
		{name: "allowed extra is not granted", allow: withRaw, want: DefaultCaps()},
		{name: "add allowed", allow: withRaw, add: []string{"CAP_NET_RAW"},
			want: withRaw, wantAdded: []string{"net_raw"}},
		{name: "add outside allow", allow: DefaultCaps(), add: []string{"net_raw", "sys_admin"},
			wantErr: "driver does not allow the following capabilities: net_raw, sys_admin"},
		{name: "drop all", allow: DefaultCaps(), drop: []string{"all"}},
		{name: "drop all then add", allow: DefaultCaps(), drop: []string{"ALL"}, add: []string{"chown", "kill"},
			want: []string{"chown", "kill"}, wantAdded: []string{"chown", "kill"}},
		{name: "add wins over drop", allow: DefaultCaps(), drop: []string{"kill"}, add: []string{"kill"},
			want: DefaultCaps(), wantAdded: []string{"kill"}},
		{name: "drop some", allow: DefaultCaps(), drop: []string{"chown", "CAP_SETUID"},
			want: slices.DeleteFunc(slices.Clone(DefaultCaps()), func(s string) bool { return s == "chown" || s == "setuid" })},
		{name: "narrow allow narrows defaults", allow: []string{"kill"}, want: []string{"kill"}},
		{name: "empty allow", allow: []string{}},
		{name: "unknown add", allow: DefaultCaps(), add: []string{"flying"},
			wantErr: "cap_add configured with capabilities not supported by system: flying"},
		{name: "unknown drop", allow: DefaultCaps(), drop: []string{"flying"},
			wantErr: "cap_drop configured with capabilities not supported by system: flying"},
		{name: "unknown allow", allow: []string{"flying"},
			wantErr: "allow_caps configured with capabilities not supported by system: flying"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, added, err := TaskCaps(tc.allow, tc.add, tc.drop)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			want, _ := ParseCaps(tc.want)
			wantAdded, _ := ParseCaps(tc.wantAdded)
			if err != nil || got != want || added != wantAdded {
				t.Fatalf("got %q / %q, %v; want %q / %q", got, added, err, want, wantAdded)
			}
		})
	}
	if _, _, err := TaskCaps(nil, []string{"kill"}, nil); !errors.Is(err, ErrCapNotAllowed) {
		t.Fatalf("add with nothing allowed: %v", err)
	}
}

func TestChrootBinds(t *testing.T) {
	got := ChrootBinds(map[string]string{"/opt/tools/": "/usr/local/tools", "/usr": "/usr", "/etc/hosts": "/etc/hosts", "/etc": "/etc"})
	want := []Bind{{"/etc", "/etc"}, {"/etc/hosts", "/etc/hosts"}, {"/usr", "/usr"}, {"/opt/tools", "/usr/local/tools"}}
	if !slices.Equal(got, want) {
		t.Fatalf("binds %v, want %v", got, want)
	}
}
