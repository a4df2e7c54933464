package command

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	nomadapi "github.com/hashicorp/nomad/api"
)

const (
	defaultAddr        = "http://127.0.0.1:4646"
	defaultConnectAddr = "http://127.0.0.1:8500"
	shortID            = 8
)

// describe renders an API error as one readable line: the server's message
// instead of the client's "Unexpected response code" wrapping, and a hint
// when the agent cannot be reached.
func describe(err error, addr string) string {
	if hint := tlsHint(err, addr, "MESHLET_ADDR"); hint != "" {
		return hint
	}
	var ure nomadapi.UnexpectedResponseError
	if errors.As(err, &ure) && ure.HasBody() {
		return fmt.Sprintf("%s (HTTP %d)", oneLine(strings.TrimSpace(ure.Body())), ure.StatusCode())
	}
	if unreachable(err) {
		return fmt.Sprintf("cannot reach the meshlet agent at %s (is it running? set MESHLET_ADDR or -address): %s",
			addr, rootCause(err))
	}
	return oneLine(err.Error())
}

// unreachable reports a transport failure (connection refused, DNS...).
func unreachable(err error) bool {
	var opErr *net.OpError
	var urlErr *url.Error
	return errors.As(err, &opErr) || errors.As(err, &urlErr)
}

// rootCause returns the innermost error's text.
func rootCause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// isNotFound reports whether err is an HTTP 404 from the agent.
func isNotFound(err error) bool {
	var ure nomadapi.UnexpectedResponseError
	return errors.As(err, &ure) && ure.StatusCode() == 404
}

// writeTable prints tab-separated rows aligned in columns.
func writeTable(w io.Writer, rows []string) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	_ = tw.Flush()
}

// row joins cells with tabs for writeTable. Cells are made printable, so
// that a name from the agent cannot move the cursor, clear the screen or
// reorder text (the agent rejects such names; old state may hold them).
func row(cells ...any) string {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = printable(fmt.Sprint(c))
	}
	return strings.Join(parts, "\t")
}

// writeKV prints "Key = value" lines with aligned '='; values are made
// printable.
func writeKV(w io.Writer, pairs [][2]string) {
	width := 0
	for _, p := range pairs {
		width = max(width, len(p[0]))
	}
	for _, p := range pairs {
		fmt.Fprintf(w, "%-*s = %s\n", width, p[0], printable(p[1]))
	}
}

// escapeUnprintable replaces each character of s that does not print as
// itself with its Go escape, leaving the rest as it is (for whole lines,
// where quoting the line would be noise).
func escapeUnprintable(s string) string {
	if printable(s) == s {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		chunk := s[i : i+size]
		if (r != utf8.RuneError || size > 1) && (r == ' ' || unicode.IsPrint(r)) {
			b.WriteString(chunk)
		} else {
			q := strconv.Quote(chunk)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// printable returns s unchanged when every character prints as itself,
// and otherwise s quoted with Go escapes: control characters (escape
// sequences, tabs, newlines), bidirectional formatting characters and
// invalid UTF-8 all become visible (\x1b, \u202e, \xff).
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}

// short returns an ID's first 8 characters.
func short(id string) string {
	if len(id) > shortID {
		return id[:shortID]
	}
	return id
}

// ago renders a unix-nanosecond time relative to now ("5m ago").
func ago(unixNano int64, now time.Time) string {
	if unixNano == 0 {
		return "N/A"
	}
	d := now.Sub(time.Unix(0, unixNano))
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds ago", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh ago", int(d.Hours())/24, int(d.Hours())%24)
}

// timestamp renders a unix-nanosecond time like Nomad's CLI.
func timestamp(unixNano int64) string {
	if unixNano == 0 {
		return "N/A"
	}
	return time.Unix(0, unixNano).Format(time.RFC3339)
}

// orNone returns s, or "<none>" when empty.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// deref returns *p or the zero value.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
