package sidecar

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// pathNorm is an HTTP connection manager's request path handling, applied
// before any filter or route sees the request and forwarded as changed, as
// Envoy's normalize_path, merge_slashes and path_with_escaped_slashes_action.
type pathNorm struct {
	normalize bool // RFC 3986: dot segments, unreserved %XX decoded, \ as /
	merge     bool // adjacent slashes become one
	escaped   hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction
}

func (n pathNorm) active() bool {
	return n.normalize || n.merge || n.escapedAction() != hcmv3.HttpConnectionManager_KEEP_UNCHANGED
}

// escapedAction is the action Envoy takes by default too
// (IMPLEMENTATION_SPECIFIC_DEFAULT is KEEP_UNCHANGED).
func (n pathNorm) escapedAction() hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction {
	if n.escaped == hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT {
		return hcmv3.HttpConnectionManager_KEEP_UNCHANGED
	}
	return n.escaped
}

func decodePathNorm(m *hcmv3.HttpConnectionManager) (pathNorm, error) {
	n := pathNorm{normalize: m.GetNormalizePath().GetValue(), merge: m.GetMergeSlashes(), escaped: m.GetPathWithEscapedSlashesAction()}
	if _, ok := hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction_name[int32(n.escaped)]; !ok {
		return pathNorm{}, errors.New("http_connection_manager: unknown path_with_escaped_slashes_action")
	}
	return n, nil
}

// pathVerdict is what becomes of a request's path.
type pathVerdict int

const (
	pathKeep     pathVerdict = iota // go on (the path may have changed)
	pathReject                      // 400
	pathRedirect                    // redirect to the changed path
)

// apply normalizes req's path in place (URL and RequestURI) and says
// whether the request goes on, is refused or is redirected.
func (n pathNorm) apply(req *http.Request) pathVerdict {
	// The path as the client sent it (URL.EscapedPath would turn a literal
	// backslash into %5C, which normalization must read as a slash).
	raw, _, _ := strings.Cut(req.RequestURI, "?")
	if raw == "" {
		raw = req.URL.EscapedPath()
	}
	if !strings.HasPrefix(raw, "/") {
		return pathKeep // "*" or an absolute form: nothing to normalize
	}
	out, v := n.path(raw)
	if v == pathReject || out == raw {
		return v
	}
	p, err := url.PathUnescape(out)
	if err != nil {
		return pathReject
	}
	req.URL.Path, req.URL.RawPath = p, ""
	if req.URL.EscapedPath() != out {
		req.URL.RawPath = out
	}
	req.RequestURI = req.URL.RequestURI()
	return v
}

// path is raw after the escaped-slashes action, normalization and slash
// merging, in Envoy's order.
func (n pathNorm) path(raw string) (string, pathVerdict) {
	v := pathKeep
	if hasEscapedSlash(raw) {
		switch n.escapedAction() {
		case hcmv3.HttpConnectionManager_REJECT_REQUEST:
			return raw, pathReject
		case hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT:
			v = pathRedirect
			raw = unescapeSlashes(raw)
		case hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD:
			raw = unescapeSlashes(raw)
		}
	}
	if n.normalize {
		raw = removeDotSegments(decodeUnreserved(strings.ReplaceAll(raw, `\`, "/")))
	}
	if n.merge {
		for strings.Contains(raw, "//") {
			raw = strings.ReplaceAll(raw, "//", "/")
		}
	}
	return raw, v
}

func hasEscapedSlash(p string) bool {
	for i := 0; i+2 < len(p); i++ {
		if p[i] == '%' && ((p[i+1] == '2' && (p[i+2] == 'f' || p[i+2] == 'F')) || (p[i+1] == '5' && (p[i+2] == 'c' || p[i+2] == 'C'))) {
			return true
		}
	}
	return false
}

func unescapeSlashes(p string) string {
	return strings.NewReplacer("%2f", "/", "%2F", "/", "%5c", `\`, "%5C", `\`).Replace(p)
}

// decodeUnreserved decodes the %XX escapes of RFC 3986's unreserved
// characters (letters, digits, - . _ ~); other escapes stay as sent.
func decodeUnreserved(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] != '%' || i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			b.WriteByte(p[i])
			continue
		}
		c := unhex(p[i+1])<<4 | unhex(p[i+2])
		if isUnreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteString(p[i : i+3])
		}
		i += 2
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// removeDotSegments is RFC 3986 section 5.2.4 on an absolute path: "."
// segments go, ".." takes the previous segment with it (never above the
// root), and a path ending in a dot segment keeps its trailing slash.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

// hasFragment reports whether the request target carries a #fragment,
// which RFC 9112 3.2 and RFC 9113 8.3.1 leave out of it. net/http keeps it
// in the path or query, where it would reach ext_authz, route matching
// and the upstream; Envoy refuses such requests with 400 by default
// (http_reject_path_with_fragment), and so does the proxy.
func hasFragment(req *http.Request) bool {
	return strings.IndexByte(req.RequestURI, '#') >= 0
}
