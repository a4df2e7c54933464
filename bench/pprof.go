package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ProfileEntry is one line of `go tool pprof -top`.
type ProfileEntry struct {
	Func    string
	FlatPct float64
	CumPct  float64
}

// ParsePprofTop parses the text of `go tool pprof -top`; lines before the
// "flat flat% sum% cum cum%" header are ignored.
func ParsePprofTop(out string) []ProfileEntry {
	var es []ProfileEntry
	header := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if !header {
			header = len(f) >= 5 && f[0] == "flat" && f[1] == "flat%"
			continue
		}
		if len(f) < 6 {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		name := strings.Join(f[5:], " ")
		name = strings.TrimSuffix(name, " (inline)")
		es = append(es, ProfileEntry{Func: name, FlatPct: flat, CumPct: cum})
	}
	return es
}

// PprofTop runs `go tool pprof -top` on a profile and parses it; cum sorts
// by cumulative share.
func PprofTop(ctx context.Context, goBin, profile string, n int, cum bool) ([]ProfileEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := []string{"tool", "pprof", "-top", "-nodecount", strconv.Itoa(n)}
	if cum {
		args = append(args, "-cum")
	}
	args = append(args, profile)
	out, err := exec.CommandContext(ctx, goBin, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("failed to read profile %s: %w: %s", profile, err, lastLines(string(out), 2, nil))
	}
	return ParsePprofTop(string(out)), nil
}

// Summarize renders the top entries as one finding line: the functions
// that take the most time themselves, and the project's own functions
// (those whose name contains projectPrefix) with the largest cumulative
// share.
func Summarize(what string, flat, cum []ProfileEntry, projectPrefix string, n int) string {
	var parts []string
	for _, e := range flat {
		if len(parts) == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", shortFunc(e.Func), e.FlatPct))
	}
	s := fmt.Sprintf("%s CPU profile, self time: %s", what, strings.Join(parts, ", "))
	var own []string
	for _, e := range cum {
		if len(own) == n {
			break
		}
		if strings.Contains(e.Func, projectPrefix) {
			own = append(own, fmt.Sprintf("%s %.0f%%", shortFunc(e.Func), e.CumPct))
		}
	}
	if len(own) > 0 {
		s += fmt.Sprintf("; meshlet code by cumulative share: %s", strings.Join(own, ", "))
	}
	for _, e := range cum {
		if e.Func == "runtime.gcBgMarkWorker" {
			s += fmt.Sprintf("; garbage collection %.0f%%", e.CumPct)
		}
	}
	return s + "." + hints(flat, cum)
}

// hints turns well-known profile shapes into plain words.
func hints(flat, cum []ProfileEntry) string {
	var out []string
	share := func(es []ProfileEntry, suffix string) float64 {
		for _, e := range es {
			if strings.HasSuffix(e.Func, suffix) {
				return e.FlatPct
			}
		}
		return 0
	}
	if v := share(flat, "syscall/linux.Syscall6"); v >= 25 {
		out = append(out, fmt.Sprintf("System calls take %.0f%% of the CPU by themselves, mostly write(2): the proxy already "+
			"makes one write per HTTP message and hop and one per batch of TLS records, and a write on loopback or a veth "+
			"also runs the receiving socket's TCP stack, so this is the kernel's per-hop cost, which the mesh multiplies "+
			"(a request crosses three sockets each way instead of one).", v))
	}
	aes := share(flat, "gcm.gcmAesEnc") + share(flat, "gcm.gcmAesDec")
	if aes >= 10 {
		out = append(out, fmt.Sprintf("mTLS encryption (AES-GCM) is %.0f%%: inherent to the mesh, not a defect.", aes))
	}
	if len(out) == 0 {
		return ""
	}
	return " " + strings.Join(out, " ")
}

// shortFunc drops the import path's directories: "a/b/c.(*T).M" → "c.(*T).M".
func shortFunc(f string) string {
	paren := strings.Index(f, "(")
	head := f
	if paren >= 0 {
		head = f[:paren]
	}
	if i := strings.LastIndex(head, "/"); i >= 0 {
		return "`" + f[i+1:] + "`"
	}
	return "`" + f + "`"
}
