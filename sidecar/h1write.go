package sidecar

import (
	"bufio"
	"net/http"
	"slices"
	"strings"
)

// reqWriteSkip are the fields http.Request.Write writes itself (or drops)
// rather than from the header map.
var reqWriteSkip = map[string]bool{
	"Host": true, "User-Agent": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true,
}

// headerNewlines turns the line breaks a header value must not carry into
// spaces, as http.Header.Write does.
var headerNewlines = strings.NewReplacer("\n", " ", "\r", " ")

// writeRequestHead writes a request that has no body (GET and the like: the
// steady state of a keep-alive proxy) byte for byte as http.Request.Write
// would, without its per-request allocations (transfer writer, RequestURI
// string, header sorter). keys is scratch space for the sorted header
// names, returned for reuse. It reports false, having written nothing,
// for any request outside that shape; the caller then uses
// http.Request.Write.
func writeRequestHead(bw *bufio.Writer, req *http.Request, keys []string) ([]string, bool) {
	if req.Body != nil && req.Body != http.NoBody || req.ContentLength != 0 || req.Close ||
		len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 || req.Method == http.MethodConnect {
		return keys, false
	}
	u := req.URL
	host := req.Host
	if host == "" {
		host = u.Host
	}
	if u.Opaque != "" || u.RawPath != "" || u.Path == "" || u.Path[0] != '/' || u.Fragment != "" ||
		!plainHost(host) || !plainPath(u.Path) || !plainQuery(u.RawQuery) {
		return keys, false
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	_, _ = bw.WriteString(method)
	_ = bw.WriteByte(' ')
	_, _ = bw.WriteString(u.Path) // plainPath: EscapedPath would return it as is
	if u.ForceQuery || u.RawQuery != "" {
		_ = bw.WriteByte('?')
		_, _ = bw.WriteString(u.RawQuery)
	}
	_, _ = bw.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = bw.WriteString(host)
	_, _ = bw.WriteString("\r\n")
	if ua, ok := req.Header["User-Agent"]; !ok {
		_, _ = bw.WriteString("User-Agent: Go-http-client/1.1\r\n")
	} else if len(ua) > 0 && ua[0] != "" {
		writeHeaderLine(bw, "User-Agent", ua[0])
	}
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		// http.Request.Write announces their empty body.
		_, _ = bw.WriteString("Content-Length: 0\r\n")
	}
	keys = keys[:0]
	for k := range req.Header {
		if !reqWriteSkip[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !validFieldName(k) {
			continue // http.Header.Write drops it too
		}
		for _, v := range req.Header[k] {
			writeHeaderLine(bw, k, v)
		}
	}
	_, _ = bw.WriteString("\r\n") // a write error sticks: the caller's Flush reports it
	return keys, true
}

// writeHeaderLine writes "key: value\r\n" with the value cleaned as
// http.Header.Write cleans it (line breaks to spaces, outer blanks trimmed).
func writeHeaderLine(bw *bufio.Writer, k, v string) {
	if strings.ContainsAny(v, "\r\n") {
		v = headerNewlines.Replace(v)
	}
	v = strings.Trim(v, " \t")
	_, _ = bw.WriteString(k)
	_, _ = bw.WriteString(": ")
	_, _ = bw.WriteString(v)
	_, _ = bw.WriteString("\r\n")
}

// plainHost reports whether a Host value is made only of characters that
// http.Request.Write passes through unchanged (no zone, path or space to
// strip, nothing to reject).
func plainHost(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_') {
			return false
		}
	}
	return true
}

// plainPath reports whether a path is made only of the characters net/url
// leaves unescaped in a path, so that URL.EscapedPath returns it as is.
func plainPath(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("-_.~$&+,/:;=@", c) >= 0) {
			return false
		}
	}
	return true
}

// plainQuery reports whether a raw query has no control byte or space
// (http.Request.Write rejects the former; both are left to it).
func plainQuery(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// validFieldName reports whether k is an RFC 9110 token, as
// httpguts.ValidHeaderFieldName does.
func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
