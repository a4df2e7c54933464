package cni

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/coreos/go-iptables/iptables"

	"github.com/meshlet/meshlet/internal/lazyre"
)

// rule is one "-A" line of `iptables -S`.
type rule struct {
	table string
	chain string
	spec  []string // arguments after "-A <chain>", unquoted
}

// comment returns the rule's --comment value, or "".
func (r rule) comment() string { return r.arg("--comment") }

// target returns the rule's -j value, or "".
func (r rule) target() string { return r.arg("-j") }

func (r rule) arg(flag string) string {
	for i := 0; i+1 < len(r.spec); i++ {
		if r.spec[i] == flag {
			return r.spec[i+1]
		}
	}
	return ""
}

// commentTag matches the comments the bridge (ipMasq) and portmap plugins
// put on their rules: `name: "<network>" id: "<container id>"`, prefixed
// by "dnat " for portmap.
var commentTag = lazyre.New(`name: "([^"]*)" id: "([^"]*)"`)

// tagOf returns the network and container ID a rule is tagged with.
func (r rule) tagOf() (network, id string, ok bool) {
	m := commentTag.FindStringSubmatch(r.comment())
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// splitRule tokenizes one line of `iptables -S`: words separated by
// spaces, double-quoted words with backslash escapes.
func splitRule(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord, inQuote := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case inQuote && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case inQuote && c == '"':
			inQuote = false
		case inQuote:
			cur.WriteByte(c)
		case c == '"':
			inQuote, inWord = true, true
		case c == ' ' || c == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unterminated quote in iptables rule %q", line)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// parseRules parses `iptables -t <table> -S` output into its user chains
// ("-N") and rules ("-A"). Unparseable lines are skipped.
func parseRules(table string, out []byte) (chains map[string]bool, rules []rule) {
	chains = map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		words, err := splitRule(strings.TrimSpace(line))
		if err != nil || len(words) < 2 {
			continue
		}
		switch words[0] {
		case "-N":
			chains[words[1]] = true
		case "-A":
			rules = append(rules, rule{table: table, chain: words[1], spec: words[2:]})
		}
	}
	return chains, rules
}

// ipt runs iptables for cleanup. Plugins do the normal work themselves.
type ipt struct {
	path string
	h    *iptables.IPTables
}

func (m *Manager) iptables() (*ipt, error) {
	path, err := m.lookPath("iptables")
	if err != nil {
		return nil, iptablesMissingError(err)
	}
	return newIPT(path)
}

func newIPT(path string) (*ipt, error) {
	h, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Path(path), iptables.Timeout(10))
	if err != nil {
		return nil, iptablesMissingError(err)
	}
	return &ipt{path: path, h: h}, nil
}

// list returns the user chains and rules of a whole table.
func (t *ipt) list(table string) (map[string]bool, []rule, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(t.path, "-w", "10", "-t", table, "-S")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("failed to list iptables table %s: %w (%s)", table, err, strings.TrimSpace(stderr.String()))
	}
	chains, rules := parseRules(table, stdout.Bytes())
	return chains, rules, nil
}

// deleteRule deletes one rule; a rule already gone is not an error.
func (t *ipt) deleteRule(r rule) error {
	if err := t.h.DeleteIfExists(r.table, r.chain, r.spec...); err != nil {
		return fmt.Errorf("failed to delete iptables rule in %s/%s: %w", r.table, r.chain, err)
	}
	return nil
}

// deleteChain flushes and deletes a chain; a chain already gone is not an
// error.
func (t *ipt) deleteChain(table, chain string) error {
	if err := t.h.ClearAndDeleteChain(table, chain); err != nil {
		var e *iptables.Error
		if errors.As(err, &e) && e.IsNotExist() {
			return nil
		}
		return fmt.Errorf("failed to delete iptables chain %s/%s: %w", table, chain, err)
	}
	return nil
}
